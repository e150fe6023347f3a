"""``binlake maintain``: compact small files, expire old snapshots, remove orphan data files.

Safe only while nothing writes the table: it takes the table's lease in the state store (a writer
holding it makes ``maintain`` refuse, naming the holder), and it refuses a table whose snapshot is
unfinished, since chunk commits are recognised on resume from their snapshots' summaries.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import time
import uuid
from collections import defaultdict
from dataclasses import asdict, dataclass
from typing import Any

import pyarrow.fs as pafs
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask, Table
from pyiceberg.table.snapshots import Operation

from binlake.errors import BinlakeError
from binlake.schema.iceberg_types import identifier_columns
from binlake.sink.file_systems import file_system
from binlake.sink.layout import sorted_rows
from binlake.sink.pyiceberg_internals import DeltaOverwrite, target_file_size, transaction, write_data_files
from binlake.state.holders import Holder
from binlake.state.leases import Command, TableBusyError
from binlake.state.store import StateStore, StoredPlan

log = logging.getLogger(__name__)


class MaintenanceRefusedError(BinlakeError):
    """The table cannot be maintained now."""


@dataclass(frozen=True)
class MaintenanceOptions:
    expire_older_than: dt.timedelta = dt.timedelta(days=7)
    orphans_older_than: dt.timedelta = dt.timedelta(days=3)
    lease: dt.timedelta = dt.timedelta(hours=1)
    rewrite_partitions: bool = False
    """Also rewrite the files of earlier partition specs into the current one (``sink.layout``)."""


@dataclass(frozen=True)
class MaintenanceReport:
    table: str
    files_compacted: int
    files_written: int
    snapshots_expired: int
    orphans_removed: int
    orphan_bytes: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def maintain(
    catalog: Catalog,
    store: StateStore,
    pipeline: str,
    identifier: str,
    plan: StoredPlan | None,
    options: MaintenanceOptions,
    holder: Holder | None = None,
) -> MaintenanceReport:
    """Maintain one sink table (see the module docstring).

    Raises:
        MaintenanceRefusedError: a writer holds the table, or its snapshot is unfinished.
    """
    if plan is not None and plan.finished < len(plan.chunks):
        raise MaintenanceRefusedError(
            f"Refusing to maintain {identifier}: its snapshot is unfinished ({plan.finished} of "
            f"{len(plan.chunks)} chunks). Chunk commits are recognised from snapshot summaries, so old "
            "snapshots must stay until `binlake snapshot` has finished it."
        )
    holder = holder or Holder.this_process(Command.MAINTAIN)
    try:
        store.leases(pipeline).hold([identifier], holder, options.lease)
    except TableBusyError as e:
        raise MaintenanceRefusedError(
            f"Refusing to maintain {identifier}: {e} Maintenance rewrites files a writer may be "
            "using; stop the writer (or wait for it) and run `binlake maintain` again."
        ) from None
    started = time.monotonic()
    try:
        table = catalog.load_table(identifier)
        compacted, written = compact(table, options.rewrite_partitions)
        expired = expire_snapshots(table, options.expire_older_than)
        orphans, orphan_bytes = remove_orphans(table, options.orphans_older_than)
    finally:
        store.leases(pipeline).release(identifier, holder)
    report = MaintenanceReport(
        identifier, compacted, written, expired, orphans, orphan_bytes, time.monotonic() - started
    )
    log.info("maintained %s: %s", identifier, report)
    return report


def compact(table: Table, rewrite_partitions: bool = False) -> tuple[int, int]:
    """Rewrite, per partition, the small data files (under 3/4 of the target size) and the files
    that have delete files into target-sized files in the table's sort order (with
    ``rewrite_partitions``, the files of earlier partition specs too, into the current one), and
    retire the delete files that then point at no live file — all in one commit. Returns (files
    replaced, files written)."""
    if table.current_snapshot() is None:
        return 0, 0
    target = target_file_size(table.properties)
    current = table.spec().spec_id
    groups: dict[tuple[int, str], list[FileScanTask]] = defaultdict(list)
    for task in table.scan().plan_files():
        old_spec = rewrite_partitions and task.file.spec_id != current
        if task.file.file_size_in_bytes < target * 3 // 4 or task.delete_files or old_spec:
            groups[(task.file.spec_id, repr(task.file.partition))].append(task)
    small = [
        tasks
        for (spec_id, _), tasks in groups.items()
        if len(tasks) > 1 or any(t.delete_files for t in tasks) or (rewrite_partitions and spec_id != current)
    ]
    if not small:
        return 0, 0
    rewritten = {t.file.file_path for tasks in small for t in tasks}
    retired = _retirable_delete_files(table, small, rewritten)
    keys = identifier_columns(table.schema())
    replaced = written = 0
    with transaction(table) as tx:
        metadata = tx.table_metadata
        write_uuid, counter = uuid.uuid4(), itertools.count(0)
        with DeltaOverwrite(
            operation=Operation.OVERWRITE,
            transaction=tx,
            io=table.io,
            commit_uuid=write_uuid,
            snapshot_properties={"binlake.operation": "compact"},
            retired_delete_files=retired,
        ) as snap:
            for tasks in small:
                # One scan of them all: pyiceberg brings the files' columns to one Arrow schema
                # (files from other writers hold string or large_string, say).
                data = ArrowScan(metadata, table.io, metadata.schema(), AlwaysTrue()).to_table(tasks=tasks)
                data = sorted_rows(data, metadata, keys)
                for task in tasks:
                    snap.delete_data_file(task.file)
                    replaced += 1
                if not data.num_rows:  # every row deleted (merge-on-read): nothing to write
                    continue
                files = [t.file for t in tasks]
                for data_file in write_data_files(metadata, data, table.io, write_uuid, counter, files):
                    snap.append_data_file(data_file)
                    written += 1
    return replaced, written


def _retirable_delete_files(table: Table, groups: list[list[FileScanTask]], rewritten: set[str]) -> set[str]:
    """Delete files all of whose rows point at files being rewritten (or already gone)."""
    live = {t.file.file_path for t in table.scan().plan_files()} - rewritten
    retired = set()
    for delete_file in {d.file_path: d for tasks in groups for t in tasks for d in t.delete_files}.values():
        with table.io.new_input(delete_file.file_path).open() as stream:
            targets = set(pq.read_table(stream, columns=["file_path"]).column("file_path").to_pylist())
        if not targets & live:
            retired.add(delete_file.file_path)
    return retired


def expire_snapshots(table: Table, older_than: dt.timedelta) -> int:
    """Expire snapshots older than ``older_than`` (the current one always stays)."""
    table.refresh()
    before = len(table.snapshots())
    cutoff = dt.datetime.now(dt.UTC) - older_than
    table.maintenance.expire_snapshots().older_than(cutoff).commit()
    table.refresh()
    return before - len(table.snapshots())


def remove_orphans(table: Table, older_than: dt.timedelta) -> tuple[int, int]:
    """Delete data files under the table's ``data/`` folder that no snapshot references and that are
    older than ``older_than`` (younger ones may belong to a commit in flight)."""
    table.refresh()
    referenced = {_path(p) for p in table.inspect.all_files().column("file_path").to_pylist()}
    location = table.location().rstrip("/") + "/data"
    filesystem, root = file_system(location)
    try:
        infos = filesystem.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return 0, 0
    cutoff = dt.datetime.now(dt.UTC) - older_than
    removed = size = 0
    for info in infos:
        if info.type != pafs.FileType.File or _path(info.path) in referenced:
            continue
        modified = info.mtime if info.mtime.tzinfo else info.mtime.replace(tzinfo=dt.UTC)
        if modified <= cutoff:
            filesystem.delete_file(info.path)
            removed += 1
            size += info.size or 0
    return removed, size


def _path(uri: str) -> str:
    return uri.split("://", 1)[1] if "://" in uri else uri
