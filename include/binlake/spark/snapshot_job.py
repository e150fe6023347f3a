"""The snapshot job's driver: schedule chunk groups on Spark, commit their files, record progress.

1. **Reconcile**: chunks whose data an earlier run committed to Iceberg but whose state-store record
   it did not write (a crash between the two) are recognised from the snapshot summaries and marked
   finished, so they are never read twice.
2. **Read** the remaining chunks in waves, each wave one Spark job (``spark/chunk_jobs.py``) whose
   tasks each read a group of consecutive chunks of one table.
3. **Commit** a wave's files of each table with its chunks' ids and watermarks in one Iceberg commit,
   then mark the chunks finished in the state store — as soon as the wave's tasks holding the table's
   chunks are done, while its other tasks still run. A crash loses at most the wave in flight.
4. **Switch**: once every chunk of the pipeline is finished, the binlog start offset — the smallest
   high watermark — is stored for the stream.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyiceberg.catalog import Catalog

from binlake.config import PipelineConfig
from binlake.events import CreateTable, TableId, table_to_dict
from binlake.job_metrics import JobMetrics
from binlake.offsets import BinlogOffset
from binlake.planner import discover_tables
from binlake.schema.table_rules import table_rules
from binlake.sink.catalog import open_catalog
from binlake.sink.exactly_once import ChunkCommit
from binlake.sink.history.changelog_writer import ChangelogWriter
from binlake.sink.history.companions import companion_writers
from binlake.sink.history.state_table import StateTable
from binlake.sink.partition_files import Partitioning
from binlake.sink.pyiceberg_internals import DEFAULT_TARGET_FILE_SIZE, target_file_size
from binlake.sink.writer import IcebergWriter
from binlake.snapshot import SnapshotError
from binlake.snapshot.chunks import chunk_groups, chunk_waves, planned, reconcile, selected
from binlake.snapshot.progress import Progress, SnapshotReport, snapshot_figures, track
from binlake.snapshot.rereads import (
    changed_tables,
    changed_under,
    forget_gone,
    new_tables,
    restart,
    straddled,
)
from binlake.snapshot.switch import high_watermarks, switch
from binlake.source.chunks.splitter import ChunkId
from binlake.spark.chunk_jobs import TaskError, finished_groups
from binlake.spark.runtime.heap import frozen_heap
from binlake.state.fencing import writer_lease, writing
from binlake.state.holders import Holder
from binlake.state.leases import Command, TableBusyError
from binlake.state.store import StateStore
from binlake.stream.positions import tls_key

log = logging.getLogger(__name__)

#: How long a snapshot's hold on a table lasts unless renewed (it is renewed every wave).
LEASE = dt.timedelta(hours=1)


def run_snapshot(
    config: PipelineConfig,
    spark: Any,
    tables: Sequence[str] | None = None,
    chunk_ids: Sequence[str] | None = None,
    progress: Progress | None = None,
) -> SnapshotReport:
    """Read every unfinished planned chunk (of ``tables`` / ``chunk_ids`` if given) into Iceberg.

    Raises:
        SnapshotError: nothing is planned, or a named table or chunk is not in the plan.
    """
    started = time.monotonic()
    name = config.pipeline.name
    part = snapshot_part(tables, chunk_ids)
    metrics = JobMetrics("snapshot", name, config.pipeline.metrics_dir, part)

    def observed(report: SnapshotReport, seconds: float) -> None:
        metrics.observe(*snapshot_figures(report))
        if progress:
            progress(report, seconds)

    with (
        frozen_heap(collect=False),  # what lives now outlives the snapshot
        metrics.run(),
        StateStore(config.pipeline.resolved_state_uri) as store,
        writing(store.engine, name, Command.SNAPSHOT, writer_lease(config), part) as fence,
    ):
        holder = fence.lease.holder
        report = SnapshotReport(name)
        restarts: Counter[TableId] = Counter()
        while True:
            schemas = {s.table: s for s in discover_tables(config)}
            for table in forget_gone(config, store, schemas):
                report.tables.pop(table.name, None)
            if tables is None and chunk_ids is None:
                for new in new_tables(store, name, schemas).values():
                    restart(config, store, new, restarts, "it is captured and has no plan")
            for table in changed_tables(config, store, planned(store, name, tables), schemas):
                restart(config, store, schemas[table], restarts, "its schema changed")
            changed = _read_pending(
                config, spark, store, holder, schemas, tables, chunk_ids, observed, report, started
            )
            why = "its schema changed"
            if not changed and tables is None and chunk_ids is None:
                now = {s.table: s for s in discover_tables(config)}
                changed, why = dict(new_tables(store, name, now)), "it appeared during the snapshot"
            if not changed:
                changed, why = (
                    straddled(config, store, schemas),
                    "a statement changed it among its chunk reads",
                )
            if not changed:
                break
            for schema in changed.values():
                if schema is not None:  # None: gone, forgotten at the next round's start
                    restart(config, store, schema, restarts, why)
        report.switch_offset = switch(store, name, schemas)
        report.high_watermarks = high_watermarks(store, name)
        report.seconds = time.monotonic() - started
        metrics.observe(*snapshot_figures(report))
        return report


def snapshot_part(tables: Sequence[str] | None, chunk_ids: Sequence[str] | None) -> str:
    """Which part of the snapshot a run writes, as its writer lease names it: runs of other parts
    (Airflow's mapped jobs, one per chunk group) write side by side; two of one part never."""
    if not tables and not chunk_ids:
        return ""
    names = sorted(chunk_ids or tables or ())
    digest = hashlib.sha256("\n".join(names).encode()).hexdigest()[:12]
    what = "chunks" if chunk_ids else "tables"
    return f"of {len(names)} {what} {names[0]}…{names[-1]} ({digest})"


def _read_pending(
    config: PipelineConfig,
    spark: Any,
    store: StateStore,
    holder: Holder,
    schemas: dict[TableId, CreateTable],
    tables: Sequence[str] | None,
    chunk_ids: Sequence[str] | None,
    progress: Progress | None,
    report: SnapshotReport,
    started: float,
) -> dict[TableId, CreateTable | None]:
    """Read every pending chunk in waves. Returns the planned tables whose schema changed under a
    wave, with their schema now (None: gone) — that wave is not committed, the caller reads them
    again; empty when every chunk was read."""
    name = config.pipeline.name
    plans = planned(store, name, tables)
    catalog = open_catalog(config)
    writers = {p.table: IcebergWriter(catalog, table_rules(config, p.table).state_name) for p in plans}
    changelogs = changelog_writers(config, catalog, writers)
    report.chunks_recovered += reconcile(store, name, plans, writers)
    plans = planned(store, name, tables)
    wanted = set(chunk_ids) if chunk_ids else None
    pending = [c for p in plans for c in p.chunks if c.status != "finished" and selected(c, wanted)]
    missing = [t for t in {c.chunk.table for c in pending} if t not in schemas]
    if missing:
        raise SnapshotError(
            f"Cannot snapshot {', '.join(map(str, missing))}: the table no longer exists in the source. "
            "Fix: run `binlake plan --replan`."
        )
    track(report, plans)
    base = task_options(config, schemas, writers)
    per_task = config.pipeline.snapshot_chunks_per_task
    groups = chunk_groups(pending, config.pipeline.parallelism, per_task)
    held = sorted({w.identifier for t, w in writers.items() if any(c.chunk.table == t for c in pending)})
    commits = WaveCommits(store, name, writers, changelogs, report)
    try:
        for wave_groups in chunk_waves(groups, config.pipeline.parallelism, per_task):
            _hold(store, name, held, holder)  # taken, or renewed, before every wave
            try:
                _run_wave(spark, base, wave_groups, commits)
            except TaskError as e:
                changed = changed_under(config, {t: schemas[t] for t in writers if t in schemas})
                if changed:
                    log.warning("a table changed its schema during the snapshot: %s", e)
                    return changed
                raise SnapshotError(
                    "A snapshot task failed; its table's chunks of this Spark job were not committed "
                    "(the job's tables whose tasks had all finished were), and a rerun reads what is not "
                    f"committed. The task said: {e}"
                ) from None
            report.seconds = time.monotonic() - started
            if progress:
                progress(report, report.seconds)
    finally:
        store.leases(name).release_all(held, holder)
    return {}


@dataclass(frozen=True)
class Companions:
    """A table's state table, as the snapshot writes it, and the tables it keeps beside it."""

    state: StateTable
    writers: list[ChangelogWriter]


def changelog_writers(
    config: PipelineConfig, catalog: Catalog, writers: dict[TableId, IcebergWriter]
) -> dict[TableId, Companions]:
    """The changelog and history tables the tables keep beside their state tables (created if
    missing), each holding the snapshot chunks its state table holds (a crash between the commits)."""
    found = {}
    for table, writer in writers.items():
        rules = table_rules(config, table)
        state = StateTable(writer.table, rules.state_kind)
        companions = [
            w for w in companion_writers(rules, catalog, state) if w.identifier != writer.identifier
        ]
        for companion in companions:
            companion.seed(state)
        if companions:
            found[table] = Companions(state, companions)
    return found


def _hold(store: StateStore, pipeline: str, identifiers: list[str], holder: Holder) -> None:
    """Hold the sink tables while writing them, so maintenance (or a stream) stays away."""
    try:
        store.leases(pipeline).hold(identifiers, holder, LEASE)
    except TableBusyError as e:
        raise SnapshotError(f"Cannot snapshot into {e.lease.table}: {e} Wait for it to finish.") from None


def task_options(
    config: PipelineConfig, schemas: dict[TableId, CreateTable], writers: dict[TableId, IcebergWriter]
) -> dict[str, str]:
    source = config.source.model_dump(mode="json", exclude={"password": True, "tls": {"key"}})
    rules = {t: table_rules(config, t) for t in writers}
    target = {t.name: target_file_size(w.table.properties) for t, w in writers.items()}
    server_ids = config.source.server_id
    if len(server_ids) < config.pipeline.parallelism:
        raise SnapshotError(
            f"`source.server_id` gives {len(server_ids)} ids ({server_ids.start}-{server_ids.end}) but "
            f"`pipeline.parallelism` is {config.pipeline.parallelism}: each concurrent binlog reader needs "
            "its own id. Fix: widen the range."
        )
    return {
        "source": json.dumps(source),
        "password": config.source.password.get_secret_value(),
        "tls_key_secret": tls_key(config.source),
        "tables": json.dumps({t.name: table_to_dict(s) for t, s in schemas.items() if t in writers}),
        "locations": json.dumps({t.name: w.table.location() for t, w in writers.items()}),
        "routed": json.dumps([t.name for t, r in rules.items() if r.routed]),
        "soft_delete": json.dumps([t.name for t, r in rules.items() if r.soft_delete]),
        # A table kept without an upsert table: its chunks are written as its state table's rows.
        "shapes": json.dumps({t.name: r.state_kind for t, r in rules.items() if not r.upsert}),
        "transforms": json.dumps(
            {
                t.name: r.transform.model_dump(exclude={"source_table"})
                for t, r in rules.items()
                if r.transform
            }
        ),
        "partitioning": json.dumps(
            {t.name: p.to_json() for t, w in writers.items() if (p := Partitioning.of(w.table.metadata))}
        ),
        "target_file_size": str(min(target.values(), default=DEFAULT_TARGET_FILE_SIZE)),
        "server_ids": f"{server_ids.start}-{server_ids.end}",
    }


def _run_wave(
    spark: Any, base: dict[str, str], groups: list[list[dict[str, Any]]], commits: WaveCommits
) -> None:
    """Read a wave's groups as one Spark job and commit each table once every group holding its
    chunks has finished, while the job's other tasks still run (``chunk_jobs.finished_groups``):
    one commit per table of the wave, whatever its groups. A table a failed task read is not
    committed; chunks an earlier run committed were reconciled before."""
    tables = json.loads(base["tables"])
    waiting: dict[str, set[int]] = defaultdict(set)
    for index, group in enumerate(groups):
        for chunk in group:
            waiting[chunk["table"]].add(index)
    by_table: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for index, rows in finished_groups(spark, base, groups):
        for row in rows:
            by_table[row["table"]].append(row)
        for name in {c["table"] for c in groups[index]}:
            waiting[name].discard(index)
            if not waiting[name]:
                commits.commit(TableId.parse(name), by_table.pop(name), tables[name])


@dataclass(frozen=True)
class WaveCommits:
    """Where the snapshot commits a wave's tables, records their chunks and counts them."""

    store: StateStore
    pipeline: str
    writers: dict[TableId, IcebergWriter]
    changelogs: dict[TableId, Companions]
    report: SnapshotReport

    def commit(self, table: TableId, table_rows: list[dict[str, Any]], source_schema: dict[str, Any]) -> None:
        """Commit the files of ``table``'s chunks of a wave with their ids and watermarks, then mark
        them finished in the state store."""
        commits = [
            ChunkCommit(
                r["chunk_id"],
                BinlogOffset.from_dict(json.loads(r["high"])),
                int(r["rows"]),
                BinlogOffset.from_dict(json.loads(r["low"])),
            )
            for r in table_rows
        ]
        files = _task_files(table_rows)
        writer = self.writers[table]
        if writer.append_files(files, commits, json.dumps(source_schema)).outcome == "skipped":
            commits = _as_committed(writer, commits, files)
        kept = self.changelogs.get(table)
        if kept is not None:  # the rows just committed, as reads
            for companion in kept.writers:
                companion.seed(kept.state, {c.chunk_id for c in commits})
        self.store.plans(self.pipeline).finish_chunks(
            [
                (table, ChunkId.parse(c.chunk_id).index, c.low_watermark, c.high_watermark, c.rows)
                for c in commits
            ]
        )
        self._count(table, commits, max(int(r["max_rss_kb"]) for r in table_rows))

    def _count(self, table: TableId, commits: list[ChunkCommit], max_rss_kb: int) -> None:
        report = self.report
        progress = report.tables[table.name]
        progress.finished += len(commits)
        progress.rows += sum(c.rows for c in commits)
        report.chunks_read += len(commits)
        report.rows += sum(c.rows for c in commits)
        report.max_executor_rss_kb = max(report.max_executor_rss_kb, max_rss_kb)


def _task_files(rows: list[dict[str, Any]]) -> list[str]:
    """The files the tasks of ``rows`` (one table's) wrote, in order: each of a task's rows of a
    table lists every file the task wrote of it."""
    seen: dict[str, list[str]] = {}
    for row in rows:
        seen.setdefault(row["task"], json.loads(row["files"]))
    return [f for files in seen.values() for f in files]


def _as_committed(writer: IcebergWriter, read: list[ChunkCommit], files: list[str]) -> list[ChunkCommit]:
    """The chunks of ``read`` as an earlier run committed them: the sink holds those rows, as of
    *its* watermarks, so those are what the state store records (this run's later high watermarks
    would make the stream drop the changes in between). This run's files were never committed."""
    committed = {c.chunk_id: c for c in writer.committed_chunk_commits()}
    log.warning(
        "chunks %s of %s were committed by an earlier run: recording its watermarks; %d files of this "
        "run left for orphan removal (`binlake maintain`)",
        ", ".join(c.chunk_id for c in read),
        writer.identifier,
        len(files),
    )
    return [committed[c.chunk_id] for c in read]
