"""Compaction inside the stream: a table's manifests, files and delete files stay bounded.

Copy-on-write tables coalesce what each commit writes, so only their manifests pile up (one per
commit): ``merge_manifests`` merges them once there are ``stream.merge_manifests_at``.

Every merge-on-read batch adds a data file of new rows and a position-delete file, and every later
scan and merge plans them all: left alone, a table's commits slow down as batches accumulate
(``bench/merge.py``: 0.22 → 0.37 s over 8 batches). ``binlake maintain`` folds everything back,
but only while the stream is stopped. So after a batch's commit the writer asks this module
whether the table is due, and if so compacts a bounded share of it in a commit of its own, as
Flink's and Paimon's writers compact every few checkpoints:

- **files with many deleted rows** (at least ``deleted_share`` of their rows, Iceberg's own
  ``delete-ratio`` default for rewrite-data-files: 0.3) are rewritten without those rows, the most
  deleted first, up to ``budget_factor`` × the batch's changes in rows per compaction (at least one
  file), so the cost of a compaction follows the changes, not the table: rewriting a file whose
  share is s removes s of its rows' worth of deletes, so a budget of 1/s × the changes keeps up;
- **small files** (under a quarter of ``write.target-file-size-bytes``, which each batch's new rows
  are) are rewritten into one sorted file once a partition has ``small_files`` of them — those of
  a similar size (``_tier``), so a file that grew from earlier batches is not rewritten with every
  few new ones;
- **delete files** no live file needs any more are retired, and once a partition holds more than
  ``delete_files`` they are merged into one per partition (dropping the positions of rewritten files).

Sizes are sizes on disk, and a compaction writes files of the target size on disk
(``pyiceberg_internals.sized_on_disk``), so what it writes is not small again. While the stream
catches up (its batches come read ahead), the thresholds are ``CompactionPolicy.catching_up``'s.

Which rows a file has lost comes from the key index (its live rows per file), so deciding costs no
read. The rewrite reads the chosen files with their deletes applied, writes them sorted on the key,
and the index learns where those keys moved. The commit keeps the stream's offset and batch id (a
compaction changes no row), and a conflict leaves the compaction to a later batch.
"""

from __future__ import annotations

import itertools
import logging
import time
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import DataFile, ManifestContent
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.snapshots import Operation

from binlake.faults import crash_point
from binlake.schema.iceberg_types import identifier_columns
from binlake.sink.keys.key_index import KeyIndex
from binlake.sink.layout import sorted_rows
from binlake.sink.merge_on_read import merge_on_read, write_position_deletes
from binlake.sink.pyiceberg_internals import DeltaOverwrite, target_file_size, transaction, write_data_files

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CompactionPolicy:
    """When the stream compacts a merge-on-read table, and how much at a time (module docstring)."""

    deleted_share: float = 0.3
    budget_factor: float = 4.0
    small_files: int = 8
    delete_files: int = 16

    def catching_up(self) -> CompactionPolicy:
        """The policy while the stream is a batch or more behind: compaction waits for a debt
        ``CATCH_UP_SLACK`` times larger (files mostly deleted, more small files and delete files).

        A catch-up's batches are large and keep coming: compacting between them rewrote most of
        the table every few batches (a third of a 5M-change catch-up's time, ``bench/stream.py``),
        and the next batches made new deletes in what was just rewritten. Rewriting a file once
        3/4 of it is deleted costs 1.3 rows per deleted row removed, against 3.3 at 0.3; the
        debt stays bounded, and the batches after the catch-up pay it at the usual pace."""
        return replace(
            self,
            deleted_share=max(self.deleted_share, 0.75),
            small_files=self.small_files * CATCH_UP_SLACK,
            delete_files=self.delete_files * CATCH_UP_SLACK,
        )


#: How much more the files may pile up while the stream catches up (``catching_up``).
CATCH_UP_SLACK = 4


@dataclass(frozen=True)
class Compaction:
    """What one compaction chose: data files to rewrite, delete files to retire, and whether the
    remaining delete files are merged."""

    rewrite: list[FileScanTask]
    retire: set[str]
    merge_deletes: bool
    reasons: list[str]

    @property
    def due(self) -> bool:
        return bool(self.rewrite or self.retire or self.merge_deletes)


@dataclass(frozen=True)
class CompactionResult:
    files_rewritten: int
    files_written: int
    rows_rewritten: int
    delete_files_retired: int
    delete_files_written: int
    seconds: float
    removed: list[str]
    added: list[str]


def choose(
    tasks: Sequence[FileScanTask], live: dict[str, int], changes: int, target: int, policy: CompactionPolicy
) -> Compaction:
    """What to compact now: ``live`` is each data file's live rows (the key index's count),
    ``changes`` the rows of the batch just committed."""
    reasons = []
    deleted = {
        t.file.file_path: t.file.record_count - live.get(t.file.file_path, 0) for t in tasks if t.delete_files
    }
    worn = sorted(
        (t for t in tasks if deleted.get(t.file.file_path, 0) >= policy.deleted_share * t.file.record_count),
        key=lambda t: -deleted[t.file.file_path] / max(1, t.file.record_count),
    )
    chosen: dict[str, FileScanTask] = {}
    budget = max(1, int(policy.budget_factor * changes))
    spent = 0
    for task in worn:
        if chosen and spent + task.file.record_count > budget:
            break
        chosen[task.file.file_path] = task
        spent += task.file.record_count
    if chosen:
        reasons.append(f"{len(chosen)} of {len(worn)} files with ≥ {policy.deleted_share:.0%} rows deleted")
    # Per partition: a partitioned table's partitions are each smaller than a file, and counting
    # their small files together would rewrite the whole table every batch.
    small = [t for t in tasks if t.file.file_size_in_bytes < target // 4]
    crowded = [_tier(g) for g in _by_partition(small) if len(g) >= policy.small_files]
    crowded = [g for g in crowded if len(g) > 1]
    if crowded:
        chosen.update({t.file.file_path: t for g in crowded for t in g})
        reasons.append(f"{sum(map(len, crowded))} small files in {len(crowded)} partitions")
    delete_files = {d.file_path for t in tasks for d in t.delete_files}
    needed = {d.file_path for t in tasks if t.file.file_path not in chosen for d in t.delete_files}
    retire = delete_files - needed  # every file they point at is rewritten now
    kept = [{d.file_path for t in g for d in t.delete_files} - retire for g in _by_partition(tasks)]
    merge = max(map(len, kept), default=0) > policy.delete_files
    if merge:
        reasons.append(f"{len(delete_files - retire)} delete files")
    return Compaction(list(chosen.values()), retire if (chosen or merge) else set(), merge, reasons)


def compact(table: Table, plan: Compaction, tasks: Sequence[FileScanTask]) -> CompactionResult:
    """Carry out ``plan`` (chosen from ``tasks``, the table's current files) in one commit. Nothing
    is retried: a conflict raises pyiceberg's CommitFailedException and the compaction waits for a
    later batch."""
    started = time.monotonic()
    keys = identifier_columns(table.schema())
    rewritten = {t.file.file_path for t in plan.rewrite}
    live_files = {}
    merged_deletes: list[DataFile] = []
    retired = set(plan.retire)
    added: list[str] = []
    rows = 0
    with transaction(table) as tx:
        metadata = tx.table_metadata
        if plan.merge_deletes:
            live_files = {t.file.file_path: t.file for t in tasks if t.file.file_path not in rewritten}
            # Every delete file of the snapshot, also those older than every live file (attached to
            # none, they would stay in the manifests for good).
            old = _delete_files(table)
            merged_deletes = write_position_deletes(table.io, metadata, _positions(table, old, live_files))
            retired |= old
        write_uuid, counter = uuid.uuid4(), itertools.count(0)
        with DeltaOverwrite(
            operation=Operation.OVERWRITE,
            transaction=tx,
            io=table.io,
            commit_uuid=write_uuid,
            snapshot_properties={"binlake.operation": "compact"},
            delete_files=merged_deletes,
            retired_delete_files=retired,
            merge_manifests=True,
        ) as snap:
            if plan.rewrite:
                # One scan of every partition's files (pyiceberg brings their columns to one Arrow
                # schema: files from other writers hold string or large_string, say), written back
                # split by partition: a scan per partition cost more than its few small files.
                data = ArrowScan(metadata, table.io, metadata.schema(), AlwaysTrue()).to_table(
                    tasks=plan.rewrite
                )
                rows += data.num_rows
                data = sorted_rows(data, metadata, keys)
                for task in plan.rewrite:
                    snap.delete_data_file(task.file)
                if data.num_rows:
                    files = [t.file for t in plan.rewrite]
                    for data_file in write_data_files(metadata, data, table.io, write_uuid, counter, files):
                        snap.append_data_file(data_file)
                        added.append(data_file.file_path)
            crash_point("compaction-written")  # files written, not committed
    return CompactionResult(
        len(plan.rewrite),
        len(added),
        rows,
        len(retired),
        len(merged_deletes),
        time.monotonic() - started,
        sorted(rewritten),
        added,
    )


def _delete_files(table: Table) -> set[str]:
    snapshot = table.current_snapshot()
    if snapshot is None:
        return set()
    return {
        entry.data_file.file_path
        for manifest in snapshot.manifests(table.io)
        if manifest.content == ManifestContent.DELETES
        for entry in manifest.fetch_manifest_entry(io=table.io, discard_deleted=True)
    }


def _tier(small: list[FileScanTask]) -> list[FileScanTask]:
    """The small files of a partition worth rewriting together: from the smallest up, each next
    file while it is at most twice the size of those before it together (size-tiered, as
    RocksDB's and Paimon's universal compaction). A file that grew from many batches is rewritten
    once the new ones add up to its size, never with every batch: each row is rewritten a
    logarithmic number of times, not once per batch."""
    ordered = sorted(small, key=lambda t: t.file.file_size_in_bytes)
    for start in range(len(ordered) - 1):
        run, size = [ordered[start]], ordered[start].file.file_size_in_bytes
        for task in ordered[start + 1 :]:
            if task.file.file_size_in_bytes > 2 * size:
                break
            run.append(task)
            size += task.file.file_size_in_bytes
        if len(run) > 1:
            return run
    return []


def _by_partition(tasks: Iterable[FileScanTask]) -> list[list[FileScanTask]]:
    groups: dict[tuple[int, str], list[FileScanTask]] = defaultdict(list)
    for task in tasks:
        groups[(task.file.spec_id, repr(task.file.partition))].append(task)
    return list(groups.values())


def _positions(
    table: Table, delete_files: set[str], live: dict[str, DataFile]
) -> list[tuple[DataFile, list[int]]]:
    """The positions the delete files hold for the data files still live (others are dropped)."""
    parts = []
    for path in sorted(delete_files):
        with table.io.new_input(path).open() as stream:
            parts.append(pq.read_table(stream, columns=["file_path", "pos"]))
    if not parts:
        return []
    found = pa.concat_tables(parts)
    found = found.filter(pc.is_in(found.column("file_path"), pa.array(list(live), pa.string())))
    by_file: dict[str, list[int]] = defaultdict(list)
    for path, pos in zip(found.column("file_path").to_pylist(), found.column("pos").to_pylist(), strict=True):
        by_file[path].append(int(pos))
    return [(live[path], sorted(set(positions))) for path, positions in by_file.items()]


def after_batch(table: Table, index: KeyIndex, changes: int, policy: CompactionPolicy) -> bool:
    """Compact a bounded share of the table if it is due, in a commit of its own after a batch of
    ``changes`` rows (merged through ``index``), its manifests merged; whether it did. Best
    effort: a conflict leaves it for later."""
    if not index.describes(table):
        return False
    tasks = list(table.scan().plan_files())
    plan = choose(tasks, index.live_rows(), changes, target_file_size(table.properties), policy)
    if not plan.due:
        return False
    snapshot = table.current_snapshot()
    before = snapshot.snapshot_id if snapshot is not None else None
    try:
        result = compact(table, plan, tasks)
    except CommitFailedException as e:
        log.info("compacting %s conflicted (%s): left for a later batch", table.name(), e)
        return False
    crash_point("compaction-committed")  # committed, the key index not yet told
    index.moved(table, result.removed, result.added, before)
    log.info(
        "compacted %s (%s): %d files (%d rows) into %d, %d delete files retired, %d written, in %.2f s",
        ".".join(table.name()), "; ".join(plan.reasons), result.files_rewritten, result.rows_rewritten,
        result.files_written, result.delete_files_retired, result.delete_files_written, result.seconds,
    )  # fmt: skip
    return True


#: Iceberg's manifest merging, on for the merge-appends of `merge_manifests` (merge any 2+).
_MERGE_PROPERTIES = {"commit.manifest-merge.enabled": "true", "commit.manifest.min-count-to-merge": "2"}


def merge_manifests(table: Table, at: int) -> None:
    """Merge the current snapshot's manifests into few, once there are ``at``.

    Every batch commit adds a manifest (two on a merge-on-read table: its rows and its deletes)
    that every later scan, merge and commit reads (pyiceberg has no rewrite-manifests): planning
    grows with the commits (0.02 s after 10, 0.4 s after 200). On a copy-on-write table a
    merge-append without files is that rewrite; a merge-on-read table's delete manifests need
    binlake's producer (one manifest per content and spec). Either way one snapshot, the same
    files, the table's properties (the stream's offset) untouched. Best effort: a conflict skips it.
    """
    snapshot = table.current_snapshot()
    if snapshot is None:
        return
    count = len(snapshot.manifests(table.io))
    if count < at:
        return
    started = time.monotonic()
    try:
        with transaction(table) as tx:
            if merge_on_read(table.metadata):
                with DeltaOverwrite(
                    operation=Operation.OVERWRITE,
                    transaction=tx,
                    io=table.io,
                    snapshot_properties={"binlake.operation": "merge-manifests"},
                    merge_manifests=True,
                ):
                    pass
            else:
                tx.set_properties(_MERGE_PROPERTIES)
                with tx.update_snapshot().merge_append():
                    pass
    except CommitFailedException as e:
        log.info("merging the manifests of %s conflicted (%s): left for a later batch", table.name(), e)
        return
    after = table.current_snapshot()
    merged = len(after.manifests(table.io)) if after else 0
    log.info("merged the %d manifests of %s into %d in %.2f s", count, ".".join(table.name()), merged,
             time.monotonic() - started)  # fmt: skip
