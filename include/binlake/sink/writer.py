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

import functools
import itertools
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile
from pyiceberg.table import FileScanTask

from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset
from binlake.schema.iceberg_types import identifier_columns
from binlake.sink import compaction, exactly_once, partition_files, snapshot_retention
from binlake.sink.compaction import CompactionPolicy
from binlake.sink.copy_on_write import overwrite
from binlake.sink.exactly_once import (
    MAX_ATTEMPTS,
    SOURCE_SCHEMA_KEY,
    ChunkCommit,
    CommitConflictError,
    CommitResult,
    batch_properties,
    chunk_ids,
    chunk_summary,
    chunks_in,
    commit_result,
    conflict_retries,
)
from binlake.sink.keys.file_bounds import files_for_rows, files_in_ranges, files_to_merge
from binlake.sink.keys.key_index import KeyIndex
from binlake.sink.keys.row_match import ClearRange, batch_keys, clear_mask, in_range, row_counts, take_rows
from binlake.sink.keys.table_keys import KeyIndexError
from binlake.sink.layout import sorted_rows
from binlake.sink.merge_on_read import commit_delta, merge_on_read, scanned_positions, write_position_deletes
from binlake.sink.pyiceberg_internals import transaction, write_data_files
from binlake.sink.upkeep import Upkeep

log = logging.getLogger(__name__)


class IcebergWriter:
    """Writes to one Iceberg table, exactly once (see the module docstring).

    Args:
        catalog: the pipeline's catalog.
        identifier: ``namespace.table``.
    """

    def __init__(
        self,
        catalog: Catalog,
        identifier: str,
        merge_manifests_at: int = 0,
        key_index_dir: Path | None = None,
        compaction: CompactionPolicy | None = None,
        keep_snapshots: int = 0,
        background_upkeep: bool = False,
    ) -> None:
        self.catalog = catalog
        self.identifier = identifier
        self.table = catalog.load_table(identifier)
        self.merge_manifests_at = merge_manifests_at
        """After a batch commit, merge the table's manifests once it has this many (0: never)."""
        self.key_index_dir = key_index_dir
        """Where merge-on-read keeps the table's key index (``sink.keys.key_index``; None: none)."""
        self._key_index: KeyIndex | None = None
        self._unindexable = False  # the table holds a key twice: merged without the index till repaired
        self.compaction = compaction
        """When to compact a merge-on-read table with a key index (``sink/compaction.py``; None: never)."""
        self.keep_snapshots = keep_snapshots
        """After a batch commit, expire snapshots beyond this many (``sink/snapshot_retention``; 0: never)."""
        self._changes = 0  # rows of the last batch merged through the key index: what a compaction may spend
        self.catching_up = False
        """The stream is a batch or more behind: compact by ``CompactionPolicy.catching_up``."""
        self.upkeep = Upkeep(identifier, background_upkeep)
        """Compaction, manifest merges and expiry after a batch commit (``sink/upkeep.py``: in a
        thread of its own if ``background_upkeep``, settled before the table's next commit)."""

    def settle(self) -> None:
        """Wait for the table's upkeep under way (``sink/upkeep.py``); raise its error."""
        self.upkeep.settle()

    # -- append files (snapshot) ----------------------------------------------------------------

    def committed_chunks(self) -> dict[str, BinlogOffset]:
        """Chunk id → high watermark, for every chunk recorded in the table's snapshots."""
        return {c.chunk_id: c.high_watermark for c in self.committed_chunk_commits()}

    def committed_chunk_commits(self) -> list[ChunkCommit]:
        """Every chunk recorded in the table's snapshot summaries, as committed."""
        return exactly_once.committed_chunk_commits(self.table)

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
        summary = chunk_summary(list(chunks))
        try:
            for attempt in conflict_retries(f"commit of chunks {chunk_ids(wanted)} to {self.identifier}"):
                with attempt:
                    tries = attempt.retry_state.attempt_number
                    self.table.refresh()
                    if chunks_in(self.table, wanted, len(files)):
                        log.info("chunks %s are committed already: skipped", chunk_ids(wanted))
                        return CommitResult("skipped", None, time.monotonic() - started, tries)
                    with transaction(self.table) as tx:
                        partition_files.add_files(tx, self.table, files, summary)
                        if source_schema is not None:
                            tx.set_properties({SOURCE_SCHEMA_KEY: source_schema})
                    return commit_result(self.table, "committed", started, tries)
        except CommitFailedException:
            pass
        raise CommitConflictError(
            f"Could not commit chunks to {self.identifier}: {MAX_ATTEMPTS} conflicts in a row"
        )

    # -- merge batch (stream) -------------------------------------------------------------------

    def last_batch_id(self) -> int | None:
        return exactly_once.last_batch_id(self.table)

    def stream_offset(self) -> BinlogOffset | None:
        """The offset up to which the stream's changes of this table are in the table."""
        return exactly_once.stream_offset(self.table)

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
        keys = batch_keys(upserts, deletes, key_columns)
        return self._commit_batch(
            batch_id,
            offset,
            lambda properties: self._merge(properties, upserts, keys, key_columns, clear),
            force,
        )

    def merge_files(
        self, batch_id: int, files: Sequence[DataFile], keys: pa.Table, offset: BinlogOffset
    ) -> CommitResult:
        """A merge-on-read batch whose new rows are written already (``files``, one row per
        upserted key, by the stream's executors: ``stream.shares.bucket_merge``); ``keys``: every key
        of the batch, upserted or deleted, whose stored rows go."""
        key_columns = self._key_columns()
        return self._commit_batch(
            batch_id,
            offset,
            lambda properties: self._merge_on_read(properties, None, keys, key_columns, files=files),
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
        self.settle()
        started = time.monotonic()
        properties = batch_properties(batch_id, offset)
        try:
            for attempt in conflict_retries(f"batch {batch_id} of {self.identifier}"):
                with attempt:
                    tries = attempt.retry_state.attempt_number
                    self.table.refresh()
                    if not force and self._applied(batch_id, offset):
                        return CommitResult("skipped", None, time.monotonic() - started, tries)
                    try:
                        commit(properties)
                    except KeyIndexError as e:  # where the stream was when the keys were found not unique
                        at = f", which ends at binlog offset {offset}" if offset is not None else ""
                        raise KeyIndexError(f"{e} (Found while applying batch {batch_id}{at}.)") from None
                    result = commit_result(self.table, "committed", started, tries)
                    self.upkeep.start(functools.partial(self._upkeep, self._changes, self.catching_up))
                    self._changes = 0
                    return result
        except CommitFailedException:
            pass
        raise CommitConflictError(
            f"Could not apply batch {batch_id} to {self.identifier}: {MAX_ATTEMPTS} conflicts"
        )

    def _upkeep(self, changes: int, catching_up: bool) -> None:
        """After a batch commit of ``changes`` rows merged through the key index: compact a bounded
        share of a merge-on-read table if due (``sink/compaction.py``; it merges the manifests too),
        else merge the manifests if due; expire old snapshots; consolidate the key index if due."""
        compacted, index, policy = False, self._key_index, self.compaction
        if policy is not None and index is not None and changes:
            policy = policy.catching_up() if catching_up else policy
            compacted = compaction.after_batch(self.table, index, changes, policy)
        if not compacted and self.merge_manifests_at:
            compaction.merge_manifests(self.table, self.merge_manifests_at)
        if self.keep_snapshots:
            snapshot_retention.expire(self.table, self.keep_snapshots)
        if index is not None:
            index.consolidate()

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
        with transaction(table) as tx:
            metadata = tx.table_metadata
            schema = metadata.schema().as_arrow()
            wanted = row_counts(removes, schema)
            tasks = (
                {t.file.file_path: t for t in files_for_rows(self.table, removes, prune_column)}
                if wanted
                else {}
            )
            tasks.update((t.file.file_path, t) for t, _, _ in files_in_ranges(self.table, clear))
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
            overwrite(tx, table.io, properties, rewrites, inserts.cast(schema) if inserts.num_rows else None)
            tx.set_properties(properties)

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
        with transaction(table) as tx:
            metadata = tx.table_metadata
            order = [(k, "ascending") for k in key_columns]
            rewrites: list[tuple[Any, FileScanTask, pa.Table]] = []  # (low bound, file, its new rows)
            pending = upserts
            for task, low, high in files_to_merge(self.table, keys, key_columns, clear):
                data = ArrowScan(metadata, table.io, metadata.schema(), AlwaysTrue()).to_table(tasks=[task])
                kept = data.join(
                    keys.cast(data.select(key_columns).schema), keys=key_columns, join_type="left anti"
                )
                if clear:
                    kept = kept.filter(pc.invert(clear_mask(kept, clear)))
                if kept.num_rows != data.num_rows:
                    # The file is rewritten anyway: the upserts in its key range go into it, so
                    # files stay sorted and disjoint instead of each batch adding a file that
                    # spans every range (which the next batches would all have to rewrite).
                    mine = in_range(pending, key_columns[0], low, high)
                    merged = pa.concat_tables([kept, pending.filter(mine).cast(kept.schema)])
                    pending = pending.filter(pc.invert(mine))
                    rewrites.append((low, task, merged))
            new_rows = pending if pending.num_rows else None
            # In key order: neighbouring pieces coalesce into one file (``copy_on_write.overwrite``).
            rewrites.sort(key=lambda r: (r[0] is not None, r[0]))
            overwrite(tx, table.io, properties, [(t, rows) for _, t, rows in rewrites], new_rows, order)
            tx.set_properties(properties)

    def _merge_on_read(
        self,
        properties: dict[str, str],
        upserts: pa.Table | None,
        keys: pa.Table,
        key_columns: list[str],
        clear: Sequence[ClearRange] = (),
        files: Sequence[DataFile] = (),
    ) -> None:
        """The batch as position deletes of the replaced rows plus new data files: written here
        from ``upserts``, or already written (``files``, by the stream's executors)."""
        table = self.table
        index = self._index(key_columns) if not clear else None
        snapshot = table.current_snapshot()
        before = snapshot.snapshot_id if snapshot is not None else None
        with transaction(table) as tx:
            metadata = tx.table_metadata
            if index is not None:
                replaced = self._indexed_positions(index, keys)
            else:
                replaced = scanned_positions(self.table, metadata, keys, key_columns, clear)
            if upserts is not None and upserts.num_rows:
                rows = sorted_rows(upserts, metadata, key_columns)
                files = list(write_data_files(metadata, rows, table.io, uuid.uuid4(), itertools.count(0)))
            commit_delta(
                tx, table.io, properties, write_position_deletes(table.io, metadata, replaced), files
            )
            tx.set_properties(properties)
        if index is not None:
            index.apply(table, keys, [f.file_path for f in files], before)
            self._changes = keys.num_rows
        elif clear:  # a backfill's ranges, merged without the index: which may have repaired
            if self._key_index is not None:  # what kept it from being built
                self._key_index.forget()
            self._unindexable = False

    def _index(self, key_columns: list[str]) -> KeyIndex | None:
        """The table's key index, describing its current snapshot (rebuilt if it does not); None
        when the table has none, or holds a key twice (then until a backfill's ranges are merged)."""
        if self.key_index_dir is None or self._unindexable:
            return None
        if self._key_index is None or self._key_index.key_columns != key_columns:
            name = f"{self.identifier}-{self.table.metadata.table_uuid}"
            self._key_index = KeyIndex(self.key_index_dir / name, key_columns)
        if not self._key_index.ready(self.table):
            self._unindexable = True
            return None
        return self._key_index

    def _indexed_positions(self, index: KeyIndex, keys: pa.Table) -> list[tuple[DataFile, list[int]]]:
        found = index.positions(keys)
        files = {t.file.file_path: t.file for t in self.table.scan().plan_files()} if found else {}
        return [(files[path], positions) for path, positions in found.items()]

    def _key_columns(self) -> list[str]:
        names = identifier_columns(self.table.schema())
        if not names:
            raise BinlakeError(
                f"Cannot merge into {self.identifier}: it has no identifier fields (no primary key)."
            )
        return names
