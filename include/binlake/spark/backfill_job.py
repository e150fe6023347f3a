"""The backfill job's driver: re-snapshot chosen tables (or a key range) while the stream runs.

1. **Plan** (a new backfill id): check the pipeline can take it (a finished snapshot, the stream
   past it, chunk keys the sink can compare), split the tables again (optionally only the key
   range) and record the chunks, grouped into units, in the backfill ledger.
2. **Read** the units not read yet in waves of Spark tasks — the snapshot's own lock-free chunk
   reader, with watermarks — into Parquet files *staged* beside the table's data.
3. **Stage**: record each unit's files and its chunks' watermarks. Nothing is committed here: the
   stream applies each unit when its position reaches the unit's high watermarks
   (``stream/backfill.py``), so it stays the only writer of its tables.

``wait_applied`` waits until the stream has applied them all. A rerun with the same id resumes:
staged and applied units are not read again; stale ones (a schema change came first) are.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.planner import discover_tables
from binlake.sink.catalog import open_catalog, sink_identifier
from binlake.sink.writer import IcebergWriter
from binlake.source.chunk_splitter import ChunkRange, ChunkSplitter, choose_key_column
from binlake.source.connection import connect
from binlake.spark.snapshot_job import TASKS_PER_SLOT, task_error, task_options
from binlake.spark.snapshot_source import SnapshotDataSource
from binlake.state.backfills import TO_READ, BackfillLedger, BackfillUnit, StagedChunk
from binlake.state.codec import encode_key
from binlake.state.store import StateStore, StoredPlan
from binlake.stream.startup import STREAM, SWITCH

log = logging.getLogger(__name__)


class BackfillError(BinlakeError):
    """The backfill could not run (or the stream did not apply it)."""


@dataclass(frozen=True)
class KeyRange:
    """The chunk-key range ``[start, end)`` a backfill re-reads (None: unbounded)."""

    start: int | None = None
    end: int | None = None

    def __post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.start >= self.end:
            raise BackfillError(
                f"The key range [{self.start}, {self.end}) is empty: `from` must be below `to`."
            )

    @property
    def is_all(self) -> bool:
        return self.start is None and self.end is None


@dataclass
class BackfillReport:
    """What a backfill run did; ``as_dict`` is the job's JSON summary line (pushed to XCom)."""

    pipeline: str
    backfill_id: str
    units: int = 0
    staged: int = 0
    chunks_read: int = 0
    rows: int = 0
    seconds: float = 0.0
    tables: dict[str, int] = field(default_factory=dict)
    """Rows staged per table in this run."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "backfill_id": self.backfill_id,
            "units": self.units,
            "staged": self.staged,
            "chunks_read": self.chunks_read,
            "rows": self.rows,
            "seconds": round(self.seconds, 2),
            "rows_per_s": round(self.rows / self.seconds) if self.seconds else 0,
            "tables": self.tables,
        }


Progress = Callable[[BackfillReport], None]


def run_backfill(
    config: PipelineConfig,
    spark: Any,
    backfill_id: str,
    tables: Sequence[str] | None = None,
    key_range: KeyRange | None = None,
    chunk_size: int | None = None,
    progress: Progress | None = None,
) -> BackfillReport:
    """Plan backfill ``backfill_id`` (unless it exists: then resume it) and stage its units.

    Raises:
        BackfillError: the pipeline cannot take a backfill now, or a task failed.
    """
    started = time.monotonic()
    name = config.pipeline.name
    units = plan_backfill(config, backfill_id, tables, key_range, chunk_size)
    store = StateStore(config.pipeline.resolved_state_uri)
    try:
        ledger = BackfillLedger(store)
        schemas = {s.table: s for s in discover_tables(config)}
        report = BackfillReport(name, backfill_id, units=len(units))
        todo = [u for u in units if u.status in TO_READ]
        missing = sorted({str(u.table) for u in todo if u.table not in schemas})
        if missing:
            raise BackfillError(
                f"Cannot backfill {', '.join(missing)}: the table no longer exists in the source."
            )
        if todo:
            _read(config, spark, ledger, schemas, todo, report, started, progress)
        report.staged = sum(u.status != "pending" for u in ledger.units(name, backfill_id))
        report.seconds = time.monotonic() - started
        return report
    finally:
        store.close()


def plan_backfill(
    config: PipelineConfig,
    backfill_id: str,
    tables: Sequence[str] | None = None,
    key_range: KeyRange | None = None,
    chunk_size: int | None = None,
) -> list[BackfillUnit]:
    """The units of backfill ``backfill_id``: planned now if it is new (no Spark needed).

    Raises:
        BackfillError: the pipeline cannot take this backfill now (saying why and what to do).
    """
    store = StateStore(config.pipeline.resolved_state_uri)
    try:
        ledger = BackfillLedger(store)
        units = ledger.units(config.pipeline.name, backfill_id)
        if units:
            return units  # a rerun resumes
        schemas = {s.table: s for s in discover_tables(config)}
        return _plan(config, store, ledger, backfill_id, schemas, tables, key_range or KeyRange(), chunk_size)
    finally:
        store.close()


def _plan(
    config: PipelineConfig,
    store: StateStore,
    ledger: BackfillLedger,
    backfill_id: str,
    schemas: dict[TableId, CreateTable],
    tables: Sequence[str] | None,
    key_range: KeyRange,
    chunk_size: int | None,
) -> list[BackfillUnit]:
    name = config.pipeline.name
    plans = _checked_plans(config, store, schemas, tables, key_range)
    size = chunk_size or config.source.chunk_size
    split: dict[TableId, list[ChunkRange]] = {}
    with contextlib.closing(connect(config.source)) as conn:
        splitter = ChunkSplitter(conn, size)
        for stored in plans:
            chunks = splitter.split(schemas[stored.table], stored.key_column).chunks
            split[stored.table] = [r for r in (_clip(c.range, key_range) for c in chunks) if r is not None]
    # Units small enough for the stream to hold (unit_rows) and many enough to keep every Spark
    # slot busy, like the snapshot's groups.
    total = sum(len(r) for r in split.values())
    slots = max(1, config.pipeline.parallelism * TASKS_PER_SLOT)
    per_unit = max(
        1,
        min(
            config.pipeline.snapshot_chunks_per_task,
            config.backfill.unit_rows // size,
            math.ceil(total / slots),
        ),
    )
    units: list[tuple[TableId, str, list[ChunkRange]]] = []
    for stored in plans:
        ranges = split[stored.table]
        for i in range(0, len(ranges), per_unit):
            units.append((stored.table, stored.key_column, ranges[i : i + per_unit]))
    if not units:
        raise BackfillError(
            f"Nothing to backfill in pipeline `{name}`: no table of it can be (see the warnings above)."
        )
    ledger.create(name, backfill_id, units)
    log.info(
        "backfill %s: %d chunks of %s in %d units",
        backfill_id, sum(len(r) for _, _, r in units), ", ".join(p.table.name for p in plans), len(units),
    )  # fmt: skip
    return ledger.units(name, backfill_id)


def _checked_plans(
    config: PipelineConfig,
    store: StateStore,
    schemas: dict[TableId, CreateTable],
    tables: Sequence[str] | None,
    key_range: KeyRange,
) -> list[StoredPlan]:
    """The planned tables to backfill, refused (saying why and what to do) unless it can be done."""
    name = config.pipeline.name
    plans = store.load_plans(name)
    if not plans or store.load_offset(name, SWITCH) is None:
        raise BackfillError(
            f"Pipeline `{name}` has no finished snapshot: a backfill re-reads tables the stream keeps. "
            "Fix: run `binlake snapshot` (and the stream) first."
        )
    known = {p.table.name: p for p in plans}
    unknown = sorted(set(tables or ()) - known.keys())
    if unknown:
        raise BackfillError(
            f"Cannot backfill {unknown}: not tables of the pipeline; its tables: {sorted(known)}."
        )
    chosen = [known[t] for t in tables] if tables else plans
    streamed = store.load_offset(name, STREAM)
    skipped = []
    for stored in chosen:
        schema = schemas.get(stored.table)
        if schema is None:
            raise BackfillError(f"Cannot backfill {stored.table}: the table no longer exists in the source.")
        column = choose_key_column(schema, stored.key_column)
        if column.is_text and not tables:
            skipped.append(stored)  # all tables asked for: the ones that cannot be are named, not fatal
            log.warning(
                "backfill leaves %s out: its chunk key `%s` is text (%s), which the stream cannot compare "
                "in the column's collation; re-snapshot it instead", stored.table, column.name,
                column.column_type,
            )  # fmt: skip
            continue
        if column.is_text:
            raise BackfillError(
                f"Cannot backfill {stored.table}: its chunk key `{column.name}` is text "
                f"({column.column_type}), and the stream cannot tell which stored rows lie in a chunk "
                "without the server's collation. Fix: re-snapshot the table instead "
                "(`binlake plan --replan` then `binlake snapshot`)."
            )
        if not key_range.is_all and not column.is_integral:
            raise BackfillError(
                f"Cannot backfill a key range of {stored.table}: its chunk key `{column.name}` is "
                f"{column.column_type}, and ranges are given as integers. Fix: backfill the whole table."
            )
        marks = [c.high_watermark for c in stored.chunks if c.high_watermark is not None]
        if marks and (streamed is None or streamed < max(marks)):
            raise BackfillError(
                f"Cannot backfill {stored.table} yet: the stream has not passed its snapshot (chunks read "
                f"up to {max(marks)}; the stream is at {streamed or 'its start'}). Fix: run the stream "
                "(`binlake stream --until-caught-up`) first."
            )
    return [p for p in chosen if p not in skipped]


def _clip(chunk: ChunkRange, key_range: KeyRange) -> ChunkRange | None:
    """``chunk`` ∩ ``key_range`` (None when empty)."""
    if key_range.is_all:
        return chunk
    start, end = chunk.start, chunk.end
    if key_range.start is not None and (start is None or start < key_range.start):
        start = key_range.start
    if key_range.end is not None and (end is None or end > key_range.end):
        end = key_range.end
    if start is not None and end is not None and start >= end:
        return None
    return ChunkRange(start, end)


def _read(
    config: PipelineConfig,
    spark: Any,
    ledger: BackfillLedger,
    schemas: dict[TableId, CreateTable],
    todo: list[BackfillUnit],
    report: BackfillReport,
    started: float,
    progress: Progress | None,
) -> None:
    catalog = open_catalog(config)
    tables = {u.table for u in todo}
    writers = {t: IcebergWriter(catalog, ".".join(sink_identifier(config, t))) for t in tables}
    base = task_options(config, schemas, writers)
    base["server_ids"] = config.backfill.reader_server_ids(config.source, config.pipeline.parallelism)
    base["folder"] = f"backfill/{_safe(todo[0].backfill_id)}"
    spark.dataSource.register(SnapshotDataSource)
    wave_size = max(1, config.pipeline.parallelism * TASKS_PER_SLOT)
    for first in range(0, len(todo), wave_size):
        wave = todo[first : first + wave_size]
        groups = [_specs(u) for u in wave]
        try:
            rows = (
                spark.read.format("binlake_snapshot")
                .options(**base, groups=json.dumps(groups))
                .load()
                .toArrow()
            ).to_pylist()
        except Exception as e:  # Spark wraps a failed task's error in its own exception
            message = task_error(e)
            if message is None:
                raise
            raise BackfillError(
                f"A backfill task failed; the units staged before it stay staged, and a rerun with the "
                f"same id resumes. The task said: {message}"
            ) from None
        _stage(config.pipeline.name, ledger, wave, rows, report)
        report.seconds = time.monotonic() - started
        if progress:
            progress(report)


def _specs(unit: BackfillUnit) -> list[dict[str, Any]]:
    return [
        {
            "table": unit.table.name,
            "id": i,
            "key": unit.key_column,
            "start": encode_key(c.range.start),
            "end": encode_key(c.range.end),
        }
        for i, c in enumerate(unit.chunks)
    ]


def _stage(
    pipeline: str,
    ledger: BackfillLedger,
    wave: list[BackfillUnit],
    rows: list[dict[str, Any]],
    report: BackfillReport,
) -> None:
    by_index: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_index.setdefault(int(row["task"].split("-", 1)[0]), []).append(row)
    for index, unit in enumerate(wave):
        read = sorted(by_index.get(index, []), key=lambda r: int(r["chunk_id"].rsplit("#", 1)[1]))
        if len(read) != len(unit.chunks):
            raise BackfillError(
                f"Backfill unit {unit.name}: {len(read)} of {len(unit.chunks)} chunks came back."
            )
        chunks = [
            StagedChunk(
                c.range,
                BinlogOffset.from_dict(json.loads(r["low"])),
                BinlogOffset.from_dict(json.loads(r["high"])),
                int(r["rows"]),
            )
            for c, r in zip(unit.chunks, read, strict=True)
        ]
        ledger.stage(pipeline, unit, chunks, json.loads(read[0]["files"]))
        rows_read = sum(c.rows for c in chunks)
        report.chunks_read += len(chunks)
        report.rows += rows_read
        report.tables[unit.table.name] = report.tables.get(unit.table.name, 0) + rows_read


def _safe(text: str) -> str:
    """A backfill id as a folder name."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)


def new_backfill_id() -> str:
    """A fresh, sortable backfill id."""
    return dt.datetime.now(dt.UTC).strftime("backfill-%Y%m%dT%H%M%S%fZ")


def wait_applied(
    config: PipelineConfig,
    backfill_id: str,
    timeout_s: float | None = None,
    poll_s: float = 2.0,
    progress: Callable[[dict[str, int]], None] | None = None,
) -> list[BackfillUnit]:
    """Wait until the stream has applied every unit of ``backfill_id``.

    Raises:
        BackfillError: the backfill does not exist, a unit went stale, or the wait timed out.
    """
    name = config.pipeline.name
    deadline = time.monotonic() + (timeout_s if timeout_s is not None else config.backfill.wait_timeout_s)
    store = StateStore(config.pipeline.resolved_state_uri)
    try:
        ledger = BackfillLedger(store)
        last: dict[str, int] = {}
        while True:
            units = ledger.units(name, backfill_id)
            if not units:
                raise BackfillError(f"Pipeline `{name}` has no backfill `{backfill_id}`.")
            counts = unit_counts(units)
            if counts != last and progress is not None:
                progress(counts)
            last = counts
            stale = [u for u in units if u.status == "stale"]
            if stale:
                raise BackfillError(
                    f"Backfill `{backfill_id}`: {len(stale)} units went stale before the stream applied "
                    f"them ({stale[0].name}: {stale[0].message}). Fix: run the backfill again with the same "
                    "id; it reads them again."
                )
            if counts.get("applied", 0) == len(units):
                return units
            if time.monotonic() > deadline:
                raise BackfillError(
                    f"Backfill `{backfill_id}`: the stream applied {counts.get('applied', 0)} of "
                    f"{len(units)} units in time ({counts}). Is the stream running? Staged units wait "
                    "for it: run `binlake stream`, then wait again."
                )
            time.sleep(poll_s)
    finally:
        store.close()


def unit_counts(units: Sequence[BackfillUnit]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for unit in units:
        counts[unit.status] = counts.get(unit.status, 0) + 1
    return counts


def print_progress(report: BackfillReport) -> None:
    rate = report.rows / report.seconds if report.seconds else 0.0
    print(
        f"backfill {report.backfill_id}: {report.chunks_read} chunks staged, {report.rows:,} rows, "
        f"{rate:,.0f} rows/s, {report.seconds:.1f} s",
        file=sys.stderr,
        flush=True,
    )
