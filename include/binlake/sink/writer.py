"""Exactly-once writes into one Iceberg table: appended snapshot files, and merged change batches.

Both paths record what they commit *in the same Iceberg commit* as the data, so a retry after a
crash can tell whether the commit happened:

- **append files** (the snapshot): Parquet files written elsewhere (Spark executors) are added in
  one commit whose snapshot summary lists the chunks they hold with their high watermarks; chunks
  already in a summary are not committed again.
- **merge batch** (the stream): the rows of the batch's keys are replaced by its upserts and its
  deleted keys removed, in one commit that also stores the batch id in the table's properties; a
  batch id at or below the stored one is skipped.

Commits are never retried blindly (``commit.retry.num-retries=0``): on a conflict binlake refreshes
the table, checks again whether its batch or chunks are already there, and only then tries again.

pyiceberg writes copy-on-write: a merge rewrites every data file holding a changed key. binlake
chooses those files itself from each file's key bounds (pyiceberg's own pruning gives up on IN
lists longer than 200 values and would rewrite every file), and removes the keys with an Arrow
anti-join; tables are sorted on the key, so a batch of recent keys touches few files.
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.conversions import from_bytes
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.table import FileScanTask, Transaction
from pyiceberg.table.snapshots import Operation
from pyiceberg.types import (
    DateType,
    IcebergType,
    NestedField,
    PrimitiveType,
    TimestampType,
    TimestamptzType,
)

from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset
from binlake.schema.type_mapping import identifier_columns
from binlake.sink.merge_on_read import DeltaOverwrite, merge_on_read, write_position_deletes
from binlake.sink.route import SOURCE_TABLE_COLUMN

log = logging.getLogger(__name__)

#: Snapshot summary key listing the chunks an append commit holds (JSON).
CHUNKS_KEY = "binlake.chunks"
#: Table property and snapshot summary key of the last merged batch id.
BATCH_KEY = "binlake.batch-id"
#: Table property: the binlog offset up to which the stream has applied this table's changes.
STREAM_OFFSET_KEY = "binlake.stream-offset"
#: Table property: the source schema (JSON) the snapshot's chunks in the table were read with.
SOURCE_SCHEMA_KEY = "binlake.snapshot-schema"
MAX_ATTEMPTS = 5

Outcome = Literal["committed", "skipped"]


class CommitConflictError(BinlakeError):
    """The table kept changing under binlake's commit."""


class PartialCommitError(BinlakeError):
    """Some, not all, of a file group's chunks are already committed."""


@dataclass(frozen=True)
class ChunkCommit:
    """A chunk whose rows are in the files being committed."""

    chunk_id: str
    high_watermark: BinlogOffset
    rows: int
    low_watermark: BinlogOffset | None = None


@dataclass(frozen=True)
class CommitResult:
    outcome: Outcome
    snapshot_id: int | None
    seconds: float
    attempts: int
    files_added: int = 0
    files_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0


@dataclass(frozen=True)
class ClearRange:
    """Rows to remove in a batch commit whatever their key: ``start <= column < end`` (None:
    unbounded; an unbounded start also takes NULLs), of one source table when the sink is routed.
    A backfill replaces a key range this way, so rows the source no longer has go too."""

    column: str
    start: Any = None
    end: Any = None
    source_table: str | None = None


class IcebergWriter:
    """Writes to one Iceberg table, exactly once (see the module docstring).

    Args:
        catalog: the pipeline's catalog.
        identifier: ``namespace.table``.
    """

    def __init__(self, catalog: Catalog, identifier: str, merge_manifests_at: int = 0) -> None:
        self.catalog = catalog
        self.identifier = identifier
        self.table = catalog.load_table(identifier)
        self.merge_manifests_at = merge_manifests_at
        """After a batch commit, merge the table's manifests once it has this many (0: never)."""

    # -- append files (snapshot) ----------------------------------------------------------------

    def committed_chunks(self) -> dict[str, BinlogOffset]:
        """Chunk id → high watermark, for every chunk recorded in the table's snapshots."""
        return {c.chunk_id: c.high_watermark for c in self.committed_chunk_commits()}

    def committed_chunk_commits(self) -> list[ChunkCommit]:
        """Every chunk recorded in the table's snapshot summaries, as committed."""
        found: list[ChunkCommit] = []
        for snapshot in self.table.snapshots():
            text = snapshot.summary.additional_properties.get(CHUNKS_KEY) if snapshot.summary else None
            for entry in json.loads(text) if text else []:
                low = entry.get("low")
                found.append(
                    ChunkCommit(
                        entry["id"],
                        BinlogOffset.from_dict(entry["high"]),
                        int(entry.get("rows", 0)),
                        BinlogOffset.from_dict(low) if low else None,
                    )
                )
        return found

    def append_files(
        self, files: Sequence[str], chunks: Sequence[ChunkCommit], source_schema: str | None = None
    ) -> CommitResult:
        """Add Parquet ``files`` holding exactly the rows of ``chunks``, in one commit (which also
        records ``source_schema``, the schema they were read with, as ``SOURCE_SCHEMA_KEY``).

        Raises:
            PartialCommitError: some of the chunks are committed already and others not (the
                files mix them, so neither committing nor skipping them is right).
        """
        started = time.monotonic()
        wanted = {c.chunk_id for c in chunks}
        summary = {
            CHUNKS_KEY: json.dumps(
                [
                    {
                        "id": c.chunk_id,
                        "high": c.high_watermark.to_dict(),
                        "low": c.low_watermark.to_dict() if c.low_watermark else None,
                        "rows": c.rows,
                    }
                    for c in chunks
                ]
            )
        }
        for attempt in range(1, MAX_ATTEMPTS + 1):
            self.table.refresh()
            done = wanted & self.committed_chunks().keys()
            if done == wanted:
                log.info("chunks %s are committed already: skipped", _ids(wanted))
                return CommitResult("skipped", None, time.monotonic() - started, attempt)
            if done:
                raise PartialCommitError(
                    f"Cannot commit {len(files)} files to {self.identifier}: chunks {_ids(done)} of the "
                    f"group are committed already but {_ids(wanted - done)} are not. Fix: delete the "
                    "group's files and read its uncommitted chunks again (`binlake snapshot` does)."
                )
            try:
                with self.table.transaction() as tx:
                    tx.add_files(list(files), snapshot_properties=summary)
                    if source_schema is not None:
                        tx.set_properties({SOURCE_SCHEMA_KEY: source_schema})
            except CommitFailedException as e:
                log.warning("commit of chunks %s to %s conflicted (%s): checking again", _ids(wanted),
                            self.identifier, e)  # fmt: skip
                continue
            return self._result("committed", started, attempt)
        raise CommitConflictError(
            f"Could not commit chunks to {self.identifier}: {MAX_ATTEMPTS} conflicts in a row"
        )

    # -- merge batch (stream) -------------------------------------------------------------------

    def last_batch_id(self) -> int | None:
        value = self.table.properties.get(BATCH_KEY)
        return None if value is None else int(value)

    def stream_offset(self) -> BinlogOffset | None:
        """The offset up to which the stream's changes of this table are in the table."""
        value = self.table.properties.get(STREAM_OFFSET_KEY)
        return None if value is None else BinlogOffset.from_dict(json.loads(value))

    def merge_batch(
        self,
        batch_id: int,
        upserts: pa.Table,
        deletes: pa.Table | None = None,
        offset: BinlogOffset | None = None,
        clear: Sequence[ClearRange] = (),
        force: bool = False,
    ) -> CommitResult:
        """Replace the rows of the batch's keys with ``upserts`` and remove ``deletes``' keys
        (and every row in the ``clear`` ranges).

        Args:
            batch_id: increasing id of this batch (the stream's micro-batch id).
            upserts: whole rows, one per key, in the table's columns.
            deletes: the key columns of deleted rows (keys not also in ``upserts``).
            offset: the binlog offset the batch ends at. When given, it (not the batch id) decides
                whether the batch is in already: batch ids restart with a new Spark checkpoint,
                binlog offsets do not.
            clear: key ranges whose stored rows all go (a backfill replaces them with ``upserts``).
            force: commit even at an offset the table holds already (a backfill applied between
                batches: its ranges replaced by rows rolled forward to that offset, idempotent).
        """
        key_columns = self._key_columns()
        keys = _keys(upserts, deletes, key_columns)
        return self._commit_batch(
            batch_id,
            offset,
            lambda properties: self._merge(properties, upserts, keys, key_columns, clear),
            force,
        )

    def apply_rows(
        self,
        batch_id: int,
        inserts: pa.Table,
        removes: pa.Table,
        offset: BinlogOffset,
        prune_column: str | None = None,
        complete: bool = True,
        clear: Sequence[ClearRange] = (),
        force: bool = False,
    ) -> CommitResult:
        """Whole-row changes of a table without a primary key: add ``inserts``, and for each row
        of ``removes`` remove exactly one stored row equal to it (duplicates stay exact).

        Files are rewritten (copy-on-write) even in merge-on-read tables: a position delete
        needs positions, and finding them costs the same read as the rewrite.

        Args:
            prune_column: a column whose file bounds narrow the files that can hold ``removes``
                (the chunk key); None reads every file.
            complete: whether the table holds every row of the source (after a snapshot): then a
                row to remove that is not there is worth a warning; a stream that started later
                (``latest-offset``) meets such rows as a matter of course.
        """
        return self._commit_batch(
            batch_id,
            offset,
            lambda properties: self._rewrite_rows(
                properties, inserts, removes, prune_column, complete, clear
            ),
            force,
        )

    def _commit_batch(
        self,
        batch_id: int,
        offset: BinlogOffset | None,
        commit: Callable[[dict[str, str]], None],
        force: bool = False,
    ) -> CommitResult:
        """Run ``commit`` (one Iceberg commit that stores the batch's properties) unless the batch
        is in already; on a conflict refresh, check again, and retry."""
        started = time.monotonic()
        properties = _batch_properties(batch_id, offset)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            self.table.refresh()
            if not force and self._applied(batch_id, offset):
                return CommitResult("skipped", None, time.monotonic() - started, attempt)
            try:
                commit(properties)
            except CommitFailedException as e:
                log.warning("batch %d of %s conflicted (%s): checking again", batch_id, self.identifier, e)
                continue
            result = self._result("committed", started, attempt)
            self._merge_manifests()
            return result
        raise CommitConflictError(
            f"Could not apply batch {batch_id} to {self.identifier}: {MAX_ATTEMPTS} conflicts"
        )

    def _merge_manifests(self) -> None:
        """Merge the current snapshot's manifests into few, once there are ``merge_manifests_at``.

        Every batch commit adds a manifest that every later scan and merge reads (pyiceberg has no
        rewrite-manifests): planning grows with the commits (0.02 s after 10, 0.4 s after 200).
        A merge-append without files is that rewrite: one snapshot, the same data files, the
        table's properties (the stream's offset) untouched. Merge-on-read tables keep their
        delete manifests apart, so they are left alone. Best effort: a conflict skips it.
        """
        snapshot = self.table.current_snapshot()
        if not self.merge_manifests_at or snapshot is None or merge_on_read(self.table.metadata):
            return
        count = len(snapshot.manifests(self.table.io))
        if count < self.merge_manifests_at:
            return
        started = time.monotonic()
        try:
            with self.table.transaction() as tx:
                tx.set_properties(_MERGE_PROPERTIES)
                with tx.update_snapshot().merge_append():
                    pass
        except CommitFailedException as e:
            log.info(
                "merging the manifests of %s conflicted (%s): left for a later batch", self.identifier, e
            )
            return
        after = self.table.current_snapshot()
        merged = len(after.manifests(self.table.io)) if after else 0
        log.info("merged the %d manifests of %s into %d in %.2f s", count, self.identifier, merged,
                 time.monotonic() - started)  # fmt: skip

    def _applied(self, batch_id: int, offset: BinlogOffset | None) -> bool:
        if offset is not None:
            done = self.stream_offset()
            if done is not None and offset <= done:
                log.info("changes of %s up to %s are in already (up to %s): skipped", self.identifier,
                         offset, done)  # fmt: skip
                return True
            return False
        last = self.last_batch_id()
        if last is not None and batch_id <= last:
            log.info("batch %d of %s is at or below the committed batch %d: skipped", batch_id,
                     self.identifier, last)  # fmt: skip
            return True
        return False

    def _rewrite_rows(
        self,
        properties: dict[str, str],
        inserts: pa.Table,
        removes: pa.Table,
        prune_column: str | None,
        complete: bool,
        clear: Sequence[ClearRange],
    ) -> None:
        table = self.table
        with table.transaction() as tx:
            metadata = tx.table_metadata
            schema = metadata.schema().as_arrow()
            wanted = row_counts(removes, schema)
            tasks = (
                {t.file.file_path: t for t in self._files_for_rows(removes, prune_column)} if wanted else {}
            )
            tasks.update((t.file.file_path, t) for t, _, _ in self._files_in_ranges(clear))
            rewrites: list[tuple[FileScanTask, pa.Table]] = []
            for task in tasks.values():
                data = ArrowScan(metadata, table.io, metadata.schema(), AlwaysTrue()).to_table(tasks=[task])
                keep = take_rows(data, wanted, clear_mask(data, clear).to_pylist())
                if not all(keep):
                    rewrites.append((task, data.filter(pa.array(keep, pa.bool_()))))
            missing = sum(n for n in wanted.values() if n > 0)
            if missing:
                level = logging.WARNING if complete else logging.DEBUG
                log.log(level, "%d removed rows of %s were not found in the table", missing, self.identifier)
            _overwrite(tx, table.io, properties, rewrites, inserts.cast(schema) if inserts.num_rows else None)
            tx.set_properties(properties)

    def _files_for_rows(self, rows: pa.Table, column: str | None) -> list[FileScanTask]:
        if column is None or rows.column(column).null_count:
            # File bounds say nothing about NULLs: any file may hold them.
            return list(self.table.scan().plan_files()) if self.table.current_snapshot() else []
        return [task for task, _, _ in self._files_with_keys(rows.select([column]), [column])]

    def _merge(
        self,
        properties: dict[str, str],
        upserts: pa.Table,
        keys: pa.Table,
        key_columns: list[str],
        clear: Sequence[ClearRange] = (),
    ) -> None:
        if merge_on_read(self.table.metadata):
            self._merge_on_read(properties, upserts, keys, key_columns, clear)
            return
        table = self.table
        with table.transaction() as tx:
            metadata = tx.table_metadata
            order = [(k, "ascending") for k in key_columns]
            rewrites: list[tuple[Any, FileScanTask, pa.Table]] = []  # (low bound, file, its new rows)
            pending = upserts
            for task, low, high in self._files_to_merge(keys, key_columns, clear):
                data = ArrowScan(metadata, table.io, metadata.schema(), AlwaysTrue()).to_table(tasks=[task])
                kept = data.join(keys, keys=key_columns, join_type="left anti")
                if clear:
                    kept = kept.filter(pc.invert(clear_mask(kept, clear)))
                if kept.num_rows != data.num_rows:
                    # The file is rewritten anyway: the upserts in its key range go into it, so
                    # files stay sorted and disjoint instead of each batch adding a file that
                    # spans every range (which the next batches would all have to rewrite).
                    mine = _in_range(pending, key_columns[0], low, high)
                    merged = pa.concat_tables([kept, pending.filter(mine).cast(kept.schema)])
                    pending = pending.filter(pc.invert(mine))
                    rewrites.append((low, task, merged))
            new_rows = pending if pending.num_rows else None
            # In key order, so neighbouring pieces are coalesced into one file (``_overwrite``,
            # which sorts each file it writes).
            rewrites.sort(key=lambda r: (r[0] is not None, r[0]))
            _overwrite(tx, table.io, properties, [(t, rows) for _, t, rows in rewrites], new_rows, order)
            tx.set_properties(properties)

    def _merge_on_read(
        self,
        properties: dict[str, str],
        upserts: pa.Table,
        keys: pa.Table,
        key_columns: list[str],
        clear: Sequence[ClearRange] = (),
    ) -> None:
        """The batch as position deletes of the replaced rows plus one file of new rows."""
        table = self.table
        with table.transaction() as tx:
            metadata = tx.table_metadata
            wanted = list(dict.fromkeys([*key_columns, *(c.column for c in clear)]))
            if any(c.source_table for c in clear) and SOURCE_TABLE_COLUMN not in wanted:
                wanted.append(SOURCE_TABLE_COLUMN)
            key_schema = metadata.schema().select(*wanted)
            replaced = []
            for task, _, _ in self._files_to_merge(keys, key_columns, clear):
                # Read the file alone, without its delete files, so row numbers are file positions.
                stored = ArrowScan(metadata, table.io, key_schema, AlwaysTrue()).to_table(
                    tasks=[FileScanTask(task.file)]
                )
                positions = _positions(stored, keys, key_columns)
                if clear:
                    cleared = pc.indices_nonzero(clear_mask(stored, clear)).to_pylist()
                    positions = sorted(set(positions) | {int(i) for i in cleared})
                if positions:
                    replaced.append((task.file, positions))
            delete_files = write_position_deletes(table.io, metadata, replaced)
            if delete_files or upserts.num_rows:
                write_uuid, counter = uuid.uuid4(), itertools.count(0)
                with DeltaOverwrite(
                    operation=Operation.OVERWRITE,
                    transaction=tx,
                    io=table.io,
                    commit_uuid=write_uuid,
                    snapshot_properties=properties,
                    delete_files=delete_files,
                ) as snap:
                    if upserts.num_rows:
                        rows = upserts.sort_by([(k, "ascending") for k in key_columns])
                        for data_file in _dataframe_to_data_files(
                            metadata, rows, table.io, write_uuid, counter
                        ):
                            snap.append_data_file(data_file)
            tx.set_properties(properties)

    def rows_with_keys(self, keys: pa.Table) -> pa.Table:
        """The stored rows of these keys (``keys``: the table's key columns), with every delete
        file applied; reads only the files whose key bounds may hold one of them."""
        key_columns = list(keys.column_names)
        table = self.table
        tasks = [task for task, _, _ in self._files_with_keys(keys, key_columns)]
        schema = table.schema().as_arrow()
        if not tasks:
            return schema.empty_table()
        data = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue()).to_table(tasks=tasks)
        return data.join(keys.cast(data.select(key_columns).schema), keys=key_columns, join_type="inner")

    def _files_with_keys(self, keys: pa.Table, key_columns: list[str]) -> list[tuple[FileScanTask, Any, Any]]:
        """Data files whose bounds on the first key column enclose at least one batch key, with
        those bounds (None when the file has no statistics)."""
        if self.table.current_snapshot() is None or keys.num_rows == 0:
            return []
        schema = self.table.schema()
        first = schema.find_field(key_columns[0])
        values = sorted(v for v in pc.unique(keys.column(key_columns[0])).to_pylist() if v is not None)
        picked = []
        for task in self.table.scan().plan_files():
            lower = task.file.lower_bounds.get(first.field_id) if task.file.lower_bounds else None
            upper = task.file.upper_bounds.get(first.field_id) if task.file.upper_bounds else None
            if lower is None or upper is None:
                picked.append((task, None, None))  # no statistics: it may hold any key
                continue
            low, high = _bound(first.field_type, lower), _bound(first.field_type, upper)
            i = bisect.bisect_left(values, low)
            if i < len(values) and values[i] <= high:
                picked.append((task, low, high))
        return picked

    def _files_to_merge(
        self, keys: pa.Table, key_columns: list[str], clear: Sequence[ClearRange]
    ) -> list[tuple[FileScanTask, Any, Any]]:
        """Files holding a batch key, then files that may hold a row in a ``clear`` range."""
        picked = self._files_with_keys(keys, key_columns)
        seen = {task.file.file_path for task, _, _ in picked}
        for task, low, high in self._files_in_ranges(clear):
            if task.file.file_path not in seen:
                seen.add(task.file.file_path)
                picked.append((task, low, high))
        return picked

    def _files_in_ranges(self, clear: Sequence[ClearRange]) -> list[tuple[FileScanTask, Any, Any]]:
        """Data files whose bounds on a range's column meet the range (with the bounds of the first
        key column, as ``_files_with_keys`` gives them)."""
        if not clear or self.table.current_snapshot() is None:
            return []
        schema = self.table.schema()
        names = identifier_columns(schema)
        first = schema.find_field(names[0]) if names else None
        picked = []
        for task in self.table.scan().plan_files():
            if any(_file_meets(task, schema.find_field(c.column), c) for c in clear):
                low = high = None
                if first is not None:
                    lower = task.file.lower_bounds.get(first.field_id) if task.file.lower_bounds else None
                    upper = task.file.upper_bounds.get(first.field_id) if task.file.upper_bounds else None
                    if lower is not None and upper is not None:
                        low, high = _bound(first.field_type, lower), _bound(first.field_type, upper)
                picked.append((task, low, high))
        return picked

    def _key_columns(self) -> list[str]:
        names = identifier_columns(self.table.schema())
        if not names:
            raise BinlakeError(
                f"Cannot merge into {self.identifier}: it has no identifier fields (no primary key)."
            )
        return names

    def _result(self, outcome: Outcome, started: float, attempts: int) -> CommitResult:
        self.table.refresh()
        snapshot = self.table.current_snapshot()
        summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}

        def number(key: str) -> int:
            return int(summary.get(key, 0))

        return CommitResult(
            outcome,
            snapshot.snapshot_id if snapshot else None,
            time.monotonic() - started,
            attempts,
            files_added=number("added-data-files"),
            files_removed=number("deleted-data-files"),
            bytes_added=number("added-files-size"),
            bytes_removed=number("removed-files-size"),
        )


#: Iceberg's manifest merging, on for the merge-appends of `_merge_manifests` (merge any 2+).
_MERGE_PROPERTIES = {"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "2"}


def _overwrite(
    tx: Transaction,
    io: FileIO,
    properties: dict[str, str],
    rewrites: list[tuple[FileScanTask, pa.Table]],
    new_rows: pa.Table | None,
    order: list[tuple[str, str]] | None = None,
) -> None:
    """One copy-on-write commit: the rewritten files replaced by their kept rows, plus new rows.

    Neighbouring pieces are written together up to ``COALESCE_BYTES``: a stream's batches would
    otherwise leave one more small file per table each time (its new keys), and every later merge
    pays per file. Bounded, so a file the stream keeps rewriting stays small.
    """
    if not rewrites and new_rows is None:
        return
    metadata = tx.table_metadata
    write_uuid, counter = uuid.uuid4(), itertools.count(0)
    pieces = [kept for _, kept in rewrites if kept.num_rows] + ([new_rows] if new_rows is not None else [])
    with tx.update_snapshot(snapshot_properties=properties).overwrite(commit_uuid=write_uuid) as snap:
        for task, _ in rewrites:
            snap.delete_data_file(task.file)
        for data in _coalesce(pieces, COALESCE_BYTES):
            if order and len(data.column_names):
                data = data.sort_by(order)
            for data_file in _dataframe_to_data_files(metadata, data, io, write_uuid, counter):
                snap.append_data_file(data_file)


#: Arrow bytes of rows a copy-on-write commit writes into one file at most when it coalesces.
COALESCE_BYTES = 64 * 1024 * 1024


def _coalesce(pieces: list[pa.Table], limit: int) -> list[pa.Table]:
    """Consecutive ``pieces`` concatenated into tables of at most ``limit`` bytes (a bigger piece
    stays alone)."""
    groups: list[list[pa.Table]] = []
    size = 0
    for piece in pieces:
        if groups and size + piece.nbytes <= limit:
            groups[-1].append(piece)
            size += piece.nbytes
        else:
            groups.append([piece])
            size = piece.nbytes
    return [g[0] if len(g) == 1 else pa.concat_tables([t.cast(g[0].schema) for t in g]) for g in groups]


def _file_meets(task: FileScanTask, field: NestedField, clear: ClearRange) -> bool:
    """Whether a data file may hold a row of ``clear`` (by its bounds and NULL count)."""
    data_file = task.file
    if clear.start is None and (data_file.null_value_counts or {}).get(field.field_id, 1) > 0:
        return True  # the first chunk holds the NULL keys
    lower = data_file.lower_bounds.get(field.field_id) if data_file.lower_bounds else None
    upper = data_file.upper_bounds.get(field.field_id) if data_file.upper_bounds else None
    if lower is None or upper is None:
        return True
    low, high = _bound(field.field_type, lower), _bound(field.field_type, upper)
    if clear.start is not None and high < clear.start:
        return False
    return clear.end is None or low < clear.end


def row_counts(rows: pa.Table, schema: pa.Schema) -> Counter[tuple[Any, ...]]:
    """How many times each whole row (as ``schema``) is in ``rows``: what to remove by identity."""
    return Counter(tuple(r.values()) for r in rows.cast(schema).to_pylist())


def take_rows(
    data: pa.Table, wanted: Counter[tuple[Any, ...]], gone: Sequence[bool] | None = None
) -> list[bool]:
    """Which rows of ``data`` stay when one row equal to each in ``wanted`` goes (``wanted`` is used
    up as rows match, so duplicates stay exact across files); rows marked ``gone`` go anyway."""
    keep = []
    for i, row in enumerate(data.to_pylist()):
        identity = tuple(row.values())
        if gone is not None and gone[i]:
            keep.append(False)
        elif wanted.get(identity, 0) > 0:
            wanted[identity] -= 1
            keep.append(False)
        else:
            keep.append(True)
    return keep


def clear_mask(data: pa.Table, clear: Sequence[ClearRange]) -> pa.Array:
    """Which rows of ``data`` lie in one of the ``clear`` ranges."""
    mask = pa.array([False] * data.num_rows, pa.bool_())
    for c in clear:
        values = data.column(c.column)
        inside = pa.array([True] * data.num_rows, pa.bool_())
        if c.start is not None:
            inside = pc.and_(inside, pc.greater_equal(values, pa.scalar(c.start, values.type)))
        if c.end is not None:
            inside = pc.and_(inside, pc.less(values, pa.scalar(c.end, values.type)))
        inside = pc.fill_null(inside, c.start is None)  # NULL keys belong to the first chunk
        if c.source_table is not None:
            inside = pc.and_(inside, pc.equal(data.column(SOURCE_TABLE_COLUMN), c.source_table))
        mask = pc.or_(mask, inside)
    return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask


def _batch_properties(batch_id: int, offset: BinlogOffset | None) -> dict[str, str]:
    properties = {BATCH_KEY: str(batch_id)}
    if offset is not None:
        properties[STREAM_OFFSET_KEY] = json.dumps(offset.to_dict())
    return properties


def _keys(upserts: pa.Table, deletes: pa.Table | None, key_columns: list[str]) -> pa.Table:
    keys = upserts.select(key_columns)
    if deletes is not None and deletes.num_rows:
        keys = pa.concat_tables([keys, deletes.select(key_columns).cast(keys.schema)])
    return keys


_EPOCH = dt.datetime(1970, 1, 1)


def _bound(field_type: IcebergType, raw: bytes) -> Any:
    """A file's lower/upper bound as the Python value Arrow gives for the same column."""
    assert isinstance(field_type, PrimitiveType)  # key columns are primitive
    value: Any = from_bytes(field_type, raw)
    if isinstance(field_type, DateType):
        return (_EPOCH + dt.timedelta(days=value)).date()
    if isinstance(field_type, TimestampType):
        return _EPOCH + dt.timedelta(microseconds=value)
    if isinstance(field_type, TimestamptzType):
        return (_EPOCH + dt.timedelta(microseconds=value)).replace(tzinfo=dt.UTC)
    return value


def _positions(stored: pa.Table, keys: pa.Table, key_columns: list[str]) -> list[int]:
    """Row positions in ``stored`` whose key is among ``keys``."""
    if len(key_columns) == 1:
        column = key_columns[0]
        mask = pc.is_in(stored.column(column), value_set=keys.column(column).combine_chunks())
        return [int(i) for i in pc.indices_nonzero(mask).to_pylist()]
    numbered = stored.append_column("__binlake_pos", pa.array(range(stored.num_rows), pa.int64()))
    matched = numbered.join(keys.group_by(key_columns).aggregate([]), keys=key_columns, join_type="inner")
    return sorted(int(i) for i in matched.column("__binlake_pos").to_pylist())


def _in_range(rows: pa.Table, column: str, low: Any, high: Any) -> pa.ChunkedArray:
    """Mask of ``rows`` whose ``column`` lies in [low, high] (none when the bounds are unknown).

    String bounds may be truncated prefixes (Iceberg's metrics), still a valid enclosing range.
    """
    if low is None or high is None or rows.num_rows == 0:
        return pa.chunked_array([pa.array([False] * rows.num_rows, pa.bool_())])
    values = rows.column(column)
    bound_type = values.type
    return pc.and_(
        pc.greater_equal(values, pa.scalar(low, bound_type)),
        pc.less_equal(values, pa.scalar(high, bound_type)),
    )


def _ids(ids: set[str]) -> str:
    shown = sorted(ids)
    return ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
