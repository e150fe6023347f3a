"""The snapshot job's driver: schedule chunk groups on Spark, commit their files, record progress.

1. **Reconcile**: chunks whose data an earlier run committed to Iceberg but whose state-store record
   it did not write (a crash between the two) are recognised from the snapshot summaries and marked
   finished, so they are never read twice.
2. **Read** the remaining chunks in waves of Spark tasks (``binlake_snapshot`` data source), each task
   a group of consecutive chunks of one table.
3. **Commit** each task's files with its chunks' ids and watermarks in one Iceberg commit, then mark
   the chunks finished in the state store. A crash loses at most the wave in flight.
4. **Switch**: once every chunk of the pipeline is finished, the binlog start offset — the smallest
   high watermark — is stored for the stream.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import CreateTable, TableId, table_from_dict, table_to_dict
from binlake.offsets import BinlogOffset
from binlake.planner import create_sink_tables, discover_tables
from binlake.schema.type_mapping import iceberg_schema
from binlake.sink.catalog import open_catalog, sink_identifier
from binlake.sink.maintenance import DEFAULT_TARGET_FILE_SIZE
from binlake.sink.route import routed
from binlake.sink.writer import SOURCE_SCHEMA_KEY, ChunkCommit, IcebergWriter
from binlake.source.chunk_splitter import ChunkSplitter
from binlake.source.connection import connect
from binlake.source.discovery import same_schema
from binlake.spark.snapshot_source import SnapshotDataSource
from binlake.state.codec import encode_key
from binlake.state.store import ChunkState, StateStore, StoredPlan, TableBusyError
from binlake.stream.startup import ORIGIN, STREAM, SWITCH

log = logging.getLogger(__name__)

#: Tasks per wave, per unit of parallelism: enough to balance, few enough to commit often.
TASKS_PER_SLOT = 2
WRITER = "binlake snapshot"
#: Times a table is read again from the start because its schema changed, before giving up.
RESTARTS = 3
#: How long a snapshot's hold on a table lasts unless renewed (it is renewed every wave).
LEASE = dt.timedelta(hours=1)


class SnapshotError(BinlakeError):
    """The snapshot could not run."""


@dataclass
class TableProgress:
    chunks: int
    finished: int
    rows: int = 0


@dataclass
class SnapshotReport:
    """What a snapshot run did; ``as_dict`` is the job's JSON summary line (pushed to XCom)."""

    pipeline: str
    chunks_read: int = 0
    chunks_recovered: int = 0
    rows: int = 0
    seconds: float = 0.0
    tables: dict[str, TableProgress] = field(default_factory=dict)
    high_watermarks: dict[str, dict[str, Any]] = field(default_factory=dict)
    switch_offset: BinlogOffset | None = None
    max_executor_rss_kb: int = 0

    @property
    def complete(self) -> bool:
        return all(t.finished == t.chunks for t in self.tables.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "complete": self.complete,
            "chunks_read": self.chunks_read,
            "chunks_recovered": self.chunks_recovered,
            "rows": self.rows,
            "seconds": round(self.seconds, 2),
            "rows_per_s": round(self.rows / self.seconds) if self.seconds else 0,
            "tables": {k: v.__dict__ for k, v in self.tables.items()},
            "high_watermarks": self.high_watermarks,
            "switch_offset": self.switch_offset.to_dict() if self.switch_offset else None,
            "max_executor_rss_kb": self.max_executor_rss_kb,
        }


Progress = Callable[[SnapshotReport, float], None]


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
    store = StateStore(config.pipeline.resolved_state_uri)
    try:
        report = SnapshotReport(name)
        restarts: Counter[TableId] = Counter()
        while True:
            schemas = {s.table: s for s in discover_tables(config)}
            for table in _changed_tables(config, store, _plans(store, name, tables), schemas):
                _restart(config, store, schemas[table], restarts)
            changed = _read_pending(
                config, spark, store, schemas, tables, chunk_ids, progress, report, started
            )
            if not changed:
                break
            for table, schema in changed.items():
                if schema is None:
                    raise SnapshotError(
                        f"`{table}` was dropped or renamed during its snapshot. Fix: `binlake plan --replan`."
                    )
                _restart(config, store, schema, restarts)
        report.switch_offset = _switch(store, name, schemas)
        report.high_watermarks = _high_watermarks(store, name)
        report.seconds = time.monotonic() - started
        return report
    finally:
        store.close()


def _read_pending(
    config: PipelineConfig,
    spark: Any,
    store: StateStore,
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
    plans = _plans(store, name, tables)
    catalog = open_catalog(config)
    writers = {p.table: IcebergWriter(catalog, ".".join(sink_identifier(config, p.table))) for p in plans}
    report.chunks_recovered += _reconcile(store, name, plans, writers)
    plans = _plans(store, name, tables)
    wanted = set(chunk_ids) if chunk_ids else None
    pending = [c for p in plans for c in p.chunks if c.status != "finished" and _selected(c, wanted)]
    missing = [t for t in {c.chunk.table for c in pending} if t not in schemas]
    if missing:
        raise SnapshotError(
            f"Cannot snapshot {', '.join(map(str, missing))}: the table no longer exists in the source. "
            "Fix: run `binlake plan --replan`."
        )
    _track(report, plans)
    spark.dataSource.register(SnapshotDataSource)
    base = task_options(config, schemas, writers)
    groups = _groups(pending, config.pipeline.parallelism, config.pipeline.snapshot_chunks_per_task)
    wave_size = max(1, config.pipeline.parallelism * TASKS_PER_SLOT)
    held = sorted({w.identifier for t, w in writers.items() if any(c.chunk.table == t for c in pending)})
    try:
        for wave in range(0, len(groups), wave_size):
            _hold(store, name, held)  # taken, or renewed, before every wave
            try:
                _run_wave(spark, base, groups[wave : wave + wave_size], store, name, writers, report)
            except Exception as e:  # Spark wraps a failed task's error in its own exception
                message = task_error(e)
                if message is None:
                    raise
                changed = _changed_under(config, {t: schemas[t] for t in writers if t in schemas})
                if changed:
                    log.warning("a table changed its schema during the snapshot: %s", message)
                    return changed
                raise SnapshotError(
                    f"A snapshot task failed; nothing of its wave was committed, and a rerun resumes "
                    f"after the last committed wave. The task said: {message}"
                ) from None
            report.seconds = time.monotonic() - started
            if progress:
                progress(report, report.seconds)
    finally:
        for identifier in held:
            store.release_lease(name, identifier, WRITER)
    return {}


def _changed_under(
    config: PipelineConfig, schemas: dict[TableId, CreateTable]
) -> dict[TableId, CreateTable | None]:
    """The tables that no longer have their schema in ``schemas`` (as far as reading their rows
    goes), with their schema now (None: gone); one discovery for all of them."""
    now = {s.table: s for s in discover_tables(config, list(schemas))}
    return {t: now.get(t) for t, s in schemas.items() if t not in now or not same_schema(now[t], s)}


def _changed_tables(
    config: PipelineConfig, store: StateStore, plans: list[StoredPlan], schemas: dict[TableId, CreateTable]
) -> list[TableId]:
    """Tables of an unfinished snapshot whose sink table holds (or was made for) another schema
    than the table has now: a DDL between two runs, or since the plan."""
    if all(c.status == "finished" for p in store.load_plans(config.pipeline.name) for c in p.chunks):
        return []  # a finished snapshot: the stream meets later DDL in the binlog
    catalog = open_catalog(config)
    changed = []
    for plan in plans:
        schema = schemas.get(plan.table)
        identifier = ".".join(sink_identifier(config, plan.table))
        if schema is None or not catalog.table_exists(identifier):
            continue
        sink = catalog.load_table(identifier)
        recorded = sink.properties.get(SOURCE_SCHEMA_KEY)
        if recorded is not None:
            if not same_schema(table_from_dict(json.loads(recorded)), schema):
                changed.append(plan.table)
        elif not routed(config, plan.table) and _fields(sink.schema()) != _fields(iceberg_schema(schema)):
            changed.append(plan.table)
    return changed


def _fields(schema: Any) -> list[tuple[str, str]]:
    return [(f.name, str(f.field_type)) for f in schema.fields]


def _restart(
    config: PipelineConfig, store: StateStore, schema: CreateTable, restarts: Counter[TableId]
) -> None:
    """Read ``schema``'s table again from the start with that schema: a new, empty sink table and a
    new split (its committed chunks hold rows of the old schema)."""
    table = schema.table
    restarts[table] += 1
    if restarts[table] > RESTARTS:
        raise SnapshotError(
            f"The schema of `{table}` changed {RESTARTS} times while the snapshot read it. Fix: run "
            "`binlake snapshot` again once its schema changes are done."
        )
    if routed(config, table):
        raise SnapshotError(
            f"The schema of `{table}` changed during its snapshot, and it shares a sink table with other "
            "sources (`sink.routes`), which binlake cannot read again alone. Fix: `binlake plan "
            "--replan` and `binlake snapshot` for every source of that sink table."
        )
    catalog = open_catalog(config)
    identifier = ".".join(sink_identifier(config, table))
    if catalog.table_exists(identifier):
        catalog.drop_table(identifier)
    create_sink_tables(config, [schema])
    with contextlib.closing(connect(config.source)) as conn:
        split = ChunkSplitter(conn, config.source.chunk_size).split(
            schema, config.source.chunk_key_columns.get(table.name)
        )
    store.save_plans(config.pipeline.name, [split])
    log.warning(
        "the schema of %s changed during its snapshot: reading it again from the start with its new "
        "schema (%d chunks)", table, len(split.chunks),
    )  # fmt: skip


_TASK_ERROR = re.compile(r"^binlake(?:\.\w+)*\.\w*Error: (?P<message>.*)", re.MULTILINE | re.DOTALL)


def task_error(error: BaseException) -> str | None:
    """binlake's own error message inside a Spark task failure, or None if there is none."""
    matches = list(_TASK_ERROR.finditer(str(error)))
    return matches[-1].group("message").strip() if matches else None


def _hold(store: StateStore, pipeline: str, identifiers: list[str]) -> None:
    """Hold the sink tables while writing them, so maintenance (or a second run) stays away."""
    for identifier in identifiers:
        try:
            store.acquire_lease(pipeline, identifier, WRITER, LEASE)
        except TableBusyError as e:
            raise SnapshotError(f"Cannot snapshot into {identifier}: {e} Wait for it to finish.") from None


def _plans(store: StateStore, pipeline: str, tables: Sequence[str] | None) -> list[StoredPlan]:
    plans = store.load_plans(pipeline)
    if not plans:
        raise SnapshotError(f"Pipeline `{pipeline}` has no plan. Fix: run `binlake plan` first.")
    if tables:
        known = {p.table.name for p in plans}
        unknown = [t for t in tables if t not in known]
        if unknown:
            raise SnapshotError(f"Tables {unknown} are not in the plan; planned: {', '.join(sorted(known))}.")
        plans = [p for p in plans if p.table.name in tables]
    return plans


def _selected(state: ChunkState, wanted: set[str] | None) -> bool:
    return wanted is None or f"{state.chunk.table.name}#{state.chunk.chunk_id}" in wanted


def _reconcile(
    store: StateStore, pipeline: str, plans: list[StoredPlan], writers: dict[TableId, IcebergWriter]
) -> int:
    """Mark chunks finished that Iceberg has but the state store does not (returns how many)."""
    recovered: list[tuple[TableId, int, BinlogOffset | None, BinlogOffset, int]] = []
    for plan in plans:
        unfinished = {c.chunk.chunk_id for c in plan.chunks if c.status != "finished"}
        if not unfinished:
            continue
        for commit in writers[plan.table].committed_chunk_commits():
            chunk_id = int(commit.chunk_id.rsplit("#", 1)[1])
            if chunk_id in unfinished:
                recovered.append(
                    (plan.table, chunk_id, commit.low_watermark, commit.high_watermark, commit.rows)
                )
    if recovered:
        store.finish_chunks(pipeline, recovered)
        log.info(
            "recognised %d chunks committed to Iceberg by an earlier run: not read again", len(recovered)
        )
    return len(recovered)


def _track(report: SnapshotReport, plans: list[StoredPlan]) -> None:
    for plan in plans:
        report.tables[plan.table.name] = TableProgress(
            len(plan.chunks), plan.finished, sum(c.row_count or 0 for c in plan.chunks)
        )


def _groups(pending: list[ChunkState], parallelism: int, chunks_per_task: int) -> list[list[dict[str, Any]]]:
    """Consecutive chunks of one table per group: at most ``chunks_per_task``, and small enough that
    a small snapshot still keeps every slot busy."""
    by_table: dict[str, list[ChunkState]] = defaultdict(list)
    for state in pending:
        by_table[state.chunk.table.name].append(state)
    total = len(pending)
    per_group = max(1, min(chunks_per_task, math.ceil(total / max(1, parallelism * TASKS_PER_SLOT))))
    groups = []
    for table, states in sorted(by_table.items()):
        for i in range(0, len(states), per_group):
            groups.append(
                [
                    {
                        "table": table,
                        "id": s.chunk.chunk_id,
                        "key": s.chunk.key_column,
                        "start": encode_key(s.chunk.range.start),
                        "end": encode_key(s.chunk.range.end),
                    }
                    for s in states[i : i + per_group]
                ]
            )
    return groups


def task_options(
    config: PipelineConfig, schemas: dict[TableId, CreateTable], writers: dict[TableId, IcebergWriter]
) -> dict[str, str]:
    source = config.source.model_dump(mode="json", exclude={"password"})
    target = {
        t.name: int(w.table.properties.get("write.target-file-size-bytes", DEFAULT_TARGET_FILE_SIZE))
        for t, w in writers.items()
    }
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
        "tables": json.dumps({t.name: table_to_dict(s) for t, s in schemas.items() if t in writers}),
        "locations": json.dumps({t.name: w.table.location() for t, w in writers.items()}),
        "routed": json.dumps([t.name for t in writers if routed(config, t)]),
        "target_file_size": str(min(target.values(), default=DEFAULT_TARGET_FILE_SIZE)),
        "server_ids": f"{server_ids.start}-{server_ids.end}",
    }


def _run_wave(
    spark: Any,
    base: dict[str, str],
    groups: list[list[dict[str, Any]]],
    store: StateStore,
    pipeline: str,
    writers: dict[TableId, IcebergWriter],
    report: SnapshotReport,
) -> None:
    frame = spark.read.format("binlake_snapshot").options(**base, groups=json.dumps(groups)).load()
    tables = json.loads(base["tables"])
    rows = frame.toArrow().to_pylist()
    by_task: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_task[row["task"]].append(row)
    for task_rows in by_task.values():
        table = TableId.parse(task_rows[0]["table"])
        commits = [
            ChunkCommit(
                r["chunk_id"],
                BinlogOffset.from_dict(json.loads(r["high"])),
                int(r["rows"]),
                BinlogOffset.from_dict(json.loads(r["low"])),
            )
            for r in task_rows
        ]
        files = json.loads(task_rows[0]["files"])
        writers[table].append_files(files, commits, json.dumps(tables[table.name]))
        store.finish_chunks(
            pipeline,
            [
                (table, int(c.chunk_id.rsplit("#", 1)[1]), c.low_watermark, c.high_watermark, c.rows)
                for c in commits
            ],
        )
        progress = report.tables[table.name]
        progress.finished += len(commits)
        progress.rows += sum(c.rows for c in commits)
        report.chunks_read += len(commits)
        report.rows += sum(c.rows for c in commits)
        report.max_executor_rss_kb = max(
            report.max_executor_rss_kb, *(int(r["max_rss_kb"]) for r in task_rows)
        )


def _switch(store: StateStore, pipeline: str, schemas: dict[TableId, CreateTable]) -> BinlogOffset | None:
    """Store and return the stream's start offset once every planned chunk is finished.

    The schemas the snapshot read with begin the schema history there: the stream decodes from
    the switch offset on with them, and meets every later DDL in the binlog.
    """
    plans = store.load_plans(pipeline)
    states = [c for p in plans for c in p.chunks]
    if not states or any(c.status != "finished" or c.high_watermark is None for c in states):
        return None
    start = min(c.high_watermark for c in states if c.high_watermark is not None)
    if store.load_offset(pipeline, SWITCH) != start:
        # A new snapshot: a stream begins anew from it (with a new Spark checkpoint).
        store.save_offset(pipeline, SWITCH, start)
        store.delete_offset(pipeline, STREAM)
        store.delete_offset(pipeline, ORIGIN)
        store.delete_schema_history(pipeline)
        for plan in plans:
            if plan.table in schemas:
                store.record_schema(pipeline, plan.table, start, schemas[plan.table], "snapshot")
    log.info("snapshot complete: the stream starts at %s", start)
    return start


def _high_watermarks(store: StateStore, pipeline: str) -> dict[str, dict[str, Any]]:
    return {
        f"{p.table.name}#{c.chunk.chunk_id}": c.high_watermark.to_dict()
        for p in store.load_plans(pipeline)
        for c in p.chunks
        if c.high_watermark is not None
    }


def print_progress(report: SnapshotReport, seconds: float) -> None:
    """Progress for people: a bar on a terminal, plain lines in a log."""
    done = sum(t.finished for t in report.tables.values())
    total = sum(t.chunks for t in report.tables.values())
    rate = report.rows / seconds if seconds else 0.0
    remaining = (total - done) * (seconds / report.chunks_read) if report.chunks_read else 0.0
    line = (
        f"snapshot {done}/{total} chunks, {report.rows:,} rows, {rate:,.0f} rows/s, "
        f"{seconds:.1f} s elapsed, ~{remaining:.0f} s left"
    )
    if sys.stderr.isatty():
        width = 30
        filled = int(width * done / total) if total else width
        print(f"\r[{'#' * filled}{'.' * (width - filled)}] {line}", end="", file=sys.stderr, flush=True)
        if done == total:
            print(file=sys.stderr)
    else:
        print(line, file=sys.stderr, flush=True)
        for table, progress in sorted(report.tables.items()):
            print(f"  {table}: {progress.finished}/{progress.chunks} chunks", file=sys.stderr, flush=True)
