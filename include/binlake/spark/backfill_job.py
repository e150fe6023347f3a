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

import json
import logging
import time
from collections.abc import Sequence
from typing import Any

from binlake.backfill import BackfillError
from binlake.backfill.plan import UNITS_PER_SLOT, KeyRange, plan_backfill
from binlake.backfill.progress import BackfillReport, Progress, backfill_figures
from binlake.config import PipelineConfig
from binlake.events import CreateTable, TableId
from binlake.job_metrics import JobMetrics
from binlake.offsets import BinlogOffset
from binlake.planner import discover_tables
from binlake.schema.table_rules import table_rules
from binlake.sink.catalog import open_catalog
from binlake.sink.writer import IcebergWriter
from binlake.source.chunks.splitter import ChunkId
from binlake.spark.chunk_jobs import TaskError, read_chunk_groups
from binlake.spark.snapshot_job import task_options
from binlake.state.backfills import TO_READ, BackfillLedger, BackfillUnit, StagedChunk
from binlake.state.codec import encode_key
from binlake.state.fencing import writer_lease, writing
from binlake.state.store import StateStore

log = logging.getLogger(__name__)

#: The writer command of a backfill: one run of a backfill id at a time (other ids run beside it).
BACKFILL = "binlake backfill"


def run_backfill(
    config: PipelineConfig,
    spark: Any,
    backfill_id: str,
    tables: Sequence[str] | None = None,
    key_range: KeyRange | None = None,
    chunk_size: int | None = None,
    progress: Progress | None = None,
    *,
    beside_stream: bool = False,
) -> BackfillReport:
    """Plan backfill ``backfill_id`` (unless it exists: then resume it) and stage its units
    (``beside_stream``: read by the stream's healer, in the stream's process).

    Raises:
        BackfillError: the pipeline cannot take a backfill now, or a task failed.
    """
    started = time.monotonic()
    name = config.pipeline.name
    metrics = JobMetrics("backfill", name, config.pipeline.metrics_dir)

    def observed(report: BackfillReport) -> None:
        metrics.observe(*backfill_figures(report))
        if progress:
            progress(report)

    with (
        metrics.run(),
        StateStore(config.pipeline.resolved_state_uri) as store,
        writing(store.engine, name, BACKFILL, writer_lease(config), part=backfill_id, beside=beside_stream),
    ):
        units = plan_backfill(config, backfill_id, tables, key_range, chunk_size)
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
            _read(config, spark, ledger, schemas, todo, report, started, observed)
        report.staged = sum(u.status != "pending" for u in ledger.units(name, backfill_id))
        report.seconds = time.monotonic() - started
        metrics.observe(*backfill_figures(report))
        return report


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
    rules = {t: table_rules(config, t) for t in tables}
    writers = {t: IcebergWriter(catalog, rules[t].state_name) for t in tables}
    base = task_options(config, schemas, writers)
    # Staged rows are the sink table's, whatever its state table (the stream reads them as such):
    # not shaped as a changelog's or history's rows, nor split by their partitions.
    base["shapes"] = "{}"
    kept = {t: p for t, p in json.loads(base["partitioning"]).items() if rules[TableId.parse(t)].upsert}
    base["partitioning"] = json.dumps(kept)
    base["server_ids"] = config.backfill.reader_server_ids(
        config.source.server_id.end, config.pipeline.parallelism
    )
    base["folder"] = f"backfill/{_safe(todo[0].backfill_id)}"
    wave_size = max(1, config.pipeline.parallelism * UNITS_PER_SLOT)
    for first in range(0, len(todo), wave_size):
        wave = todo[first : first + wave_size]
        groups = [_specs(u) for u in wave]
        try:
            rows = read_chunk_groups(spark, base, groups)
        except TaskError as e:
            raise BackfillError(
                f"A backfill task failed; the units staged before it stay staged, and a rerun with the "
                f"same id resumes. The task said: {e}"
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
        read = sorted(by_index.get(index, []), key=lambda r: ChunkId.parse(r["chunk_id"]).index)
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
        report.table_chunks[unit.table.name] = report.table_chunks.get(unit.table.name, 0) + len(chunks)


def _safe(text: str) -> str:
    """A backfill id as a folder name."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in text)
