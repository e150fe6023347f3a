"""Appends to a changelog table (``sink/history/changelog.py``), exactly once.

- **a batch**: the stream's changelog rows, in one append commit that also records the batch's end
  offset (``IcebergWriter``'s rule: a batch at or before the stored offset is skipped).
- **snapshot chunks**: the rows the snapshot committed to the state table (the upsert table, or
  the history where the table keeps none: ``sink/history/state_table.py``), read back from the
  files that commit added and appended as ``+I`` reads, with the chunks' ids in the summary (a
  chunk already there is not appended again). ``seed`` finds the chunks the state table holds and
  the changelog does not — after each snapshot commit, and when a stream starts (a crash between
  the two commits) — so the changelog never misses a read.
"""

from __future__ import annotations

import itertools
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, DataFileContent, ManifestEntryStatus
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Snapshot

from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset
from binlake.schema.projection import project
from binlake.sink import exactly_once
from binlake.sink.column_fill import SCHEMA_CHANGE_KEY, made_change
from binlake.sink.exactly_once import ChunkCommit, CommitResult, chunk_summary, snapshot_chunks
from binlake.sink.history.changelog import (
    AFTER,
    DELETE,
    INSERT,
    METADATA,
    OP,
    ORDER,
    POSITION,
    ColumnFill,
    epoch_base,
    filled_rows,
    of_source,
    read_rows,
    shifted,
)
from binlake.sink.history.state_table import StateTable
from binlake.sink.keys.file_bounds import files_in_ranges
from binlake.sink.keys.row_match import ClearRange, clear_mask
from binlake.sink.layout import sorted_rows
from binlake.sink.pyiceberg_internals import transaction, write_data_files
from binlake.sink.writer import IcebergWriter

log = logging.getLogger(__name__)

#: The snapshot summary key naming the schema change (``offset#seq``) whose rows a commit holds.
CHANGE_KEY = SCHEMA_CHANGE_KEY
#: The snapshot summary key naming the backfill units a commit's rows hold.
UNITS_KEY = "binlake.backfill-units"


class ChangelogSeedError(BinlakeError):
    """Snapshot chunks of the state table cannot be found to be appended to the changelog."""


class ChangelogWriter(IcebergWriter):
    """An ``IcebergWriter`` of a changelog table: append-only."""

    metadata_names: tuple[str, ...] = tuple(METADATA.names)
    """The table's own columns (the others are the sink table's)."""

    def append_batch(
        self,
        batch_id: int,
        rows: pa.Table,
        offset: BinlogOffset,
        units: Sequence[str] = (),
        filled: Sequence[str] | None = None,
    ) -> CommitResult:
        """Append a batch's changelog rows (committed with ``offset``, even when there are none:
        the table then says it holds the changes up to there); ``units``: the backfill units
        whose rows are among them; ``filled``: the sink columns the source fills (a history's)."""
        rows = self._stamped(rows)
        return self._commit_batch(
            batch_id, offset, lambda properties: self._write(properties | units_summary(units), rows, filled)
        )

    def append_units(self, rows: pa.Table, units: Sequence[str], filled: Sequence[str] | None = None) -> bool:
        """Append the rows of backfill units applied between batches (the stream's offset stays),
        unless a commit holds one of ``units`` already; returns whether it appended (``filled``:
        as for ``append_batch``)."""
        self.settle()
        self.table.refresh()
        if set(units) & self.applied_units():
            log.info("backfill units %s are in %s already: skipped", ", ".join(units), self.identifier)
            return False
        self._write(units_summary(units), self._stamped(rows), filled)
        return True

    def applied_units(self) -> set[str]:
        """The backfill units whose rows the table's snapshots hold."""
        found: set[str] = set()
        for snapshot in self.table.metadata.snapshots:
            text = snapshot.summary.additional_properties.get(UNITS_KEY) if snapshot.summary else None
            found.update(json.loads(text) if text else [])
        return found

    def _write(self, properties: dict[str, str], rows: pa.Table, filled: Sequence[str] | None) -> None:
        """One commit of a batch's (or backfill units') changelog rows, with ``properties`` in its
        summary (and, but for the units, the table's); ``filled``: a history's."""
        self._append(properties, rows)

    def _append(self, properties: dict[str, str], rows: pa.Table) -> None:
        with transaction(self.table) as tx:
            self._add_rows(tx, rows, properties)
            kept = {k: v for k, v in properties.items() if k != UNITS_KEY}
            if kept:
                tx.set_properties(kept)

    def _add_rows(self, tx: Transaction, rows: pa.Table, summary: dict[str, str]) -> None:
        if not rows.num_rows:
            return
        metadata = tx.table_metadata
        rows = sorted_rows(project(rows, metadata.schema().as_arrow()), metadata, [])
        files = list(write_data_files(metadata, rows, self.table.io, uuid.uuid4(), itertools.count(0)))
        with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
            for data_file in files:
                append.append_data_file(data_file)

    def seed(self, state: StateTable, chunk_ids: set[str] | None = None) -> int:
        """Append what the state table holds and this table does not, as reads; returns the rows.

        A table that begins after its state table's stream did (a rule added later) starts from
        the state table's rows at its stream offset; otherwise each snapshot chunk the state table
        holds and this table does not (only those of ``chunk_ids``, if given) is read back from
        the files its commit added.

        Raises:
            ChangelogSeedError: a chunk's commit is gone (its snapshot expired).
        """
        if state.identifier == self.identifier:
            return 0  # the state table itself: the snapshot wrote it
        self.table.refresh()
        upsert = state.table
        upsert.refresh()
        commits = list(_chunk_commits(upsert))
        streamed = exactly_once.stream_offset(upsert)
        logged = self.stream_offset()
        if logged is None and streamed is not None and not self.committed_chunk_commits():
            return self.start_from(state, streamed, [c for _, chunks in commits for c in chunks])
        if logged is not None:  # a stream wrote it: every chunk was in before (summaries may be expired)
            return 0
        have = {c.chunk_id for c in self.committed_chunk_commits()}
        rows = 0
        for snapshot, chunks in commits:
            ids = {c.chunk_id for c in chunks}
            if ids <= have or (chunk_ids is not None and not ids & chunk_ids):
                continue
            read = _added_rows(upsert, snapshot, self._sink_columns())
            at = min(c.high_watermark for c in chunks)
            with transaction(self.table) as tx:
                self._add_rows(
                    tx, self._as_reads(read, snapshot.timestamp_ms // 1000, at), chunk_summary(chunks)
                )
            have |= ids
            rows += read.num_rows
        missing = (chunk_ids or set()) - have
        if missing:
            raise ChangelogSeedError(
                f"Could not append snapshot chunks {sorted(missing)} to the changelog {self.identifier}: "
                f"their commit to {'.'.join(upsert.name())} is no longer among its snapshots (expired). "
                f"Fix: drop {self.identifier} and run `binlake snapshot` for the table again."
            )
        if rows:
            log.info("appended %d snapshot rows of %s to %s", rows, ".".join(upsert.name()), self.identifier)
        return rows

    def start_from(self, state: StateTable, at: BinlogOffset, chunks: list[ChunkCommit]) -> int:
        """The state table's rows as reads at its stream offset ``at``, one data file at a time,
        in one commit that records ``at`` and the state table's chunks (held already)."""
        now = int(time.time())
        properties = exactly_once.batch_properties(0, at)
        with transaction(self.table) as tx:
            files, rows = self._live_rows_as(tx, state, lambda data: self._as_reads(data, now, at))
            summary = {**properties, **(chunk_summary(chunks) if chunks else {})}
            with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                for data_file in files:
                    append.append_data_file(data_file)
            tx.set_properties(properties)
        log.info("%s starts from the %d rows of %s at %s", self.identifier, rows, state.identifier, at)
        return rows

    def remove_all(
        self, state: StateTable, at: BinlogOffset, change_id: str, event_time: int, source: str | None = None
    ) -> int:
        """``-D`` of every row the state table holds (``source``'s alone, on a table routed sources
        share), at ``at`` and ``event_time`` (a TRUNCATE or DROP of the source table, applied to
        the state table next, or this table's own state), once: the commit records ``change_id``;
        returns the rows."""
        if self.holds_change(change_id):
            return 0
        removed = 0

        def shaped(data: pa.Table) -> pa.Table:
            nonlocal removed
            gone = of_source(data, source)
            removed += gone.num_rows
            return self._stamped(read_rows(gone, event_time, at, "binlog", DELETE))

        self._append_as(state, shaped, change_id)
        return removed

    def fill_all(self, state: StateTable, fill: ColumnFill, after_only: bool = False) -> int:
        """``fill``: the rows the state table holds (before its own fill) as ``-U``/``+U`` changes
        at the statement, once (the commit records ``fill.change_id``); returns the rows filled."""
        if self.holds_change(fill.change_id):
            return 0
        self.add_column(fill)
        filled = 0

        def shaped(data: pa.Table) -> pa.Table:
            nonlocal filled
            rows = self._stamped(filled_rows(data, fill, after_only))
            filled += fill.mine(data).num_rows
            return rows

        self._append_as(state, shaped, fill.change_id)
        return filled

    def _append_as(self, state: StateTable, shape: Callable[[pa.Table], pa.Table], change_id: str) -> None:
        """The state table's current rows ``shape``d into this table's, appended in one commit that
        records the schema change ``change_id``."""
        with transaction(self.table) as tx:
            files, _ = self._live_rows_as(tx, state, shape)
            with tx.update_snapshot(snapshot_properties={CHANGE_KEY: change_id}).fast_append() as append:
                for data_file in files:
                    append.append_data_file(data_file)

    def holds_change(self, change_id: str) -> bool:
        """Whether a commit of the table made the schema change ``change_id`` already (the table
        refreshed, its upkeep settled, for what follows)."""
        self.settle()
        self.table.refresh()
        return made_change(self.table, change_id)

    def add_column(self, fill: ColumnFill) -> None:
        """The filled column, if the table lacks it (optional, last: as ``ensure_*`` adds a sink
        table's column later)."""
        if fill.column not in self.table.schema().column_names:
            with self.table.update_schema() as update:
                update.add_column(fill.column, fill.field_type)
            self.table.refresh()

    def _live_rows_as(
        self, tx: Transaction, state: StateTable, shape: Callable[[pa.Table], pa.Table]
    ) -> tuple[list[DataFile], int]:
        """The state table's current rows (the sink's columns), ``shape``d into this table's rows,
        written as data files for ``tx`` (one data file's rows in memory at a time, where the
        state table's kind allows: ``StateTable.rows``); and how many rows they hold."""
        metadata, columns = tx.table_metadata, self._sink_columns()
        files: list[DataFile] = []
        rows = 0
        for data in state.rows(columns):
            shaped = project(shape(data), metadata.schema().as_arrow())
            if not shaped.num_rows:  # none of the file's rows is one ``shape`` keeps
                continue
            files += write_data_files(metadata, shaped, self.table.io, uuid.uuid4(), itertools.count(0))
            rows += data.num_rows
        return files, rows

    def state_in_ranges(self, clear: Sequence[ClearRange], columns: Sequence[str]) -> pa.Table:
        """The rows a replay of this changelog holds in the ``clear`` ranges (``columns``)."""
        self.table.refresh()
        changes = rows_in_ranges(self.table, clear).sort_by([(POSITION, "ascending"), (ORDER, "ascending")])
        state: Counter[tuple[Any, ...]] = Counter()
        for change in changes.to_pylist():
            row = tuple(change[c] for c in columns)
            state[row] += 1 if change[OP] in (INSERT, AFTER) else -1
        rows = [dict(zip(columns, row, strict=True)) for row, n in state.items() for _ in range(max(n, 0))]
        return pa.Table.from_pylist(rows, schema=changes.select(list(columns)).schema)

    def _as_reads(self, rows: pa.Table, event_time: int, at: BinlogOffset) -> pa.Table:
        """Rows read from the source (sink columns) as this table's rows: ``+I`` reads."""
        return self._stamped(read_rows(rows, event_time, at))

    def _stamped(self, rows: pa.Table) -> pa.Table:
        """Changelog rows with their positions in this table's binlog epoch (``POSITION_EPOCH``)."""
        return shifted(rows, epoch_base(self.table))

    def _sink_columns(self) -> pa.Schema:
        """The changelog's columns that come from the sink table."""
        return pa.schema([f for f in self.table.schema().as_arrow() if f.name not in self.metadata_names])


def units_summary(units: Sequence[str]) -> dict[str, str]:
    return {UNITS_KEY: json.dumps(sorted(units))} if units else {}


def rows_in_ranges(table: Table, clear: Sequence[ClearRange]) -> pa.Table:
    """The rows ``table`` holds in the ``clear`` ranges (what a backfill replaces)."""
    tasks = [task for task, _, _ in files_in_ranges(table, clear)]
    if not tasks:
        return table.schema().as_arrow().empty_table()
    # One scan of them all: pyiceberg brings the files' columns to one schema (files written
    # before a column was added, strings as string or large_string).
    data = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks=tasks)
    return data.filter(clear_mask(data, clear))


def _chunk_commits(table: Table) -> Iterator[tuple[Snapshot, list[ChunkCommit]]]:
    """The table's snapshots that committed snapshot chunks, with the chunks."""
    for snapshot in table.metadata.snapshots:
        chunks = snapshot_chunks(snapshot)
        if chunks:
            yield snapshot, chunks


def _added_rows(table: Table, snapshot: Snapshot, columns: pa.Schema) -> pa.Table:
    """The rows of the data files ``snapshot`` added, in the changelog's sink ``columns``."""
    parts = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
            if entry.status != ManifestEntryStatus.ADDED or entry.snapshot_id != snapshot.snapshot_id:
                continue
            if entry.data_file.content != DataFileContent.DATA:
                continue
            with table.io.new_input(entry.data_file.file_path).open() as f:
                parts.append(project(pq.read_table(f), columns))
    return pa.concat_tables(parts) if parts else columns.empty_table()
