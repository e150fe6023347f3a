"""The stream job's driver: Spark Structured Streaming from the binlog into Iceberg.

1. **Start**: resume where the state store says every table is applied, or start by
   ``source.startup_mode`` (``stream/startup.py``); a purged start stops with a clear error.
2. **Read**: the ``binlake_binlog`` source plans micro-batches (at most ``stream.max_bytes_per_batch``),
   executors decode their segments in parallel — and the tables' upkeep runs (``sink/upkeep.py``);
   in a backlog, the next batch's segments while the driver applies (``spark/read_ahead.py``).
3. **Apply**: ``foreachBatch`` filters, compacts and commits each table with the batch's end offset
   (``stream/apply.py``): exactly once, whatever crashes.
4. **Trigger**: every ``stream.trigger_interval_s`` seconds, or ``until_caught_up`` (Spark's
   available-now): stop once the position the source had at the start is applied
   (``spark/stream_query.py``: the query, foreachBatch, the read-ahead, stopping, errors).

The Spark checkpoint (under ``stream.checkpoint_dir``) is named after where the stream's lineage
began: a new snapshot starts a new checkpoint instead of resuming an old one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import json
import logging
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from binlake.config import PipelineConfig
from binlake.events import CreateTable, TableId, table_to_dict
from binlake.offsets import BinlogOffset
from binlake.sink.catalog import open_catalog
from binlake.sink.writer import IcebergWriter
from binlake.source.binlog.event_rows import gap_message
from binlake.source.server.connection import connect
from binlake.source.server.foreign_keys import cascading_keys
from binlake.source.server.replicas import HeldReplicaId
from binlake.spark.healer import Healer
from binlake.spark.read_ahead import READERS
from binlake.spark.runtime.heap import frozen_heap
from binlake.spark.stream_query import StreamError, run_query
from binlake.spark.stream_task import read_segment
from binlake.state.backfills import BackfillLedger
from binlake.state.fencing import Fence, writer_lease, writing
from binlake.state.leases import Command, TableBusyError
from binlake.state.repair_ledger import RepairLedger
from binlake.state.store import StateStore, StreamBatch
from binlake.stream.applier_parts import BatchHooks, Healing, SinkTables
from binlake.stream.apply import BatchApplier
from binlake.stream.backfill import StagedBackfills
from binlake.stream.failover import BinlogAnchor
from binlake.stream.metrics import stream_metrics
from binlake.stream.preflight import preflight
from binlake.stream.records import ENVELOPE_SCHEMA, empty_changes, gaps, table_changes, upserts_only
from binlake.stream.repairs import StreamRepairs
from binlake.stream.shares.sink_opener import SinkOpener

__all__ = ["StreamError", "StreamReport", "print_backfill", "print_batch", "run_stream"]

log = logging.getLogger(__name__)

#: A stream's hold on its tables lasts this long unless renewed (every batch renews it).
LEASE = dt.timedelta(minutes=10)
#: How long a batch waits for maintenance that holds one of its tables.
LEASE_WAIT_S = 600.0


@dataclass
class StreamReport:
    """What a stream run did; ``as_dict`` is the job's JSON summary line."""

    pipeline: str
    start: BinlogOffset
    start_reason: str
    batches: int = 0
    rows: int = 0
    applied: dict[str, dict[str, int]] = field(default_factory=dict)
    end: BinlogOffset | None = None
    last_lag_s: float | None = None
    seconds: float = 0.0

    def add(self, batch: StreamBatch) -> None:
        self.batches += 1
        self.rows += batch.rows
        self.end = batch.end_offset
        self.last_lag_s = batch.lag_s
        for table, counts in batch.changes.items():
            mine = self.applied.setdefault(table, {})
            for op, n in counts.items():
                mine[op] = mine.get(op, 0) + n

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "start": self.start.to_dict(),
            "start_reason": self.start_reason,
            "end": self.end.to_dict() if self.end else None,
            "batches": self.batches,
            "rows": self.rows,
            "applied": self.applied,
            "seconds": round(self.seconds, 2),
            "rows_per_s": round(self.rows / self.seconds) if self.seconds else 0,
            "last_lag_s": self.last_lag_s,
        }


BatchProgress = Callable[[StreamBatch, StreamReport], None]


def run_stream(
    config: PipelineConfig,
    spark: Any,
    until_caught_up: bool = False,
    progress: BatchProgress | None = None,
    stop: threading.Event | None = None,
) -> StreamReport:
    """Stream the binlog into Iceberg until caught up, stopped (``stop``), or failed.

    Raises:
        StreamError: the stream cannot start, or a batch failed (nothing of that batch is lost:
            a rerun applies it).
        StartupError, BinlogPurgedError: see ``stream/startup.py``.
    """
    started = time.monotonic()
    name = config.pipeline.name
    ids = config.source.server_id
    if len(ids) < config.pipeline.parallelism + 1:
        raise StreamError(
            f"`source.server_id` gives {len(ids)} ids ({ids.start}-{ids.end}) but the stream needs "
            f"`pipeline.parallelism` + 1 = {config.pipeline.parallelism + 1}: one per binlog reader "
            "running at once, and one to plan batches. Fix: widen the range."
        )
    store = StateStore(config.pipeline.resolved_state_uri)
    try:
        with (
            writing(store.engine, name, Command.STREAM, writer_lease(config)) as fence,
            # The planning side's replica id, held while the stream runs: a snapshot's chunk
            # readers claim theirs from the same range (``stream/positions.segment_ids``).
            HeldReplicaId(config.source, ids.end) as planning,
        ):
            return _stream(config, spark, store, fence, planning, until_caught_up, progress, stop, started)
    finally:
        store.close()


def _stream(
    config: PipelineConfig,
    spark: Any,
    store: StateStore,
    fence: Fence,
    planning: HeldReplicaId,
    until_caught_up: bool,
    progress: BatchProgress | None,
    stop: threading.Event | None,
    started: float,
) -> StreamReport:
    name = config.pipeline.name
    ids = config.source.server_id
    held: list[str] = []
    writers: dict[str, IcebergWriter] = {}
    try:
        catalog = open_catalog(config)
        ready = preflight(config, store, catalog)
        make_sink = SinkOpener(config, catalog)
        writers = make_sink.writers
        sinks = {s.table.name: sink for s in ready.schemas if (sink := make_sink(s)) is not None}
        for sink in sinks.values():
            for companion in (sink.changelog, sink.history):  # a crash between a snapshot's commits,
                if companion is not None:  # a rule added later
                    companion.seed(sink.state)
        start = ready.start
        log.info("stream of %s starts at %s (%s)", name, start.offset, start.reason)
        report = StreamReport(name, start.offset, start.reason)
        held = sorted(writers)

        metrics = stream_metrics(config, store, lambda: len(repairs.held()), fence.epoch)

        def on_batch(batch: StreamBatch) -> None:
            if metrics is not None:
                metrics.after_batch(batch, batch.phases)
            report.add(batch)
            report.seconds = time.monotonic() - started
            if progress is not None:
                progress(batch, report)

        repairs = StreamRepairs(
            name, RepairLedger(store, name), BackfillLedger(store), ready.snapshot_filter, _cascades(config),
            heal=config.stream.on_gap == "backfill",
        )  # fmt: skip
        applier = BatchApplier(
            name,
            uuid.uuid4().hex,
            store,
            SinkTables(
                sinks, ready.snapshot_filter, make_sink, ready.tracker,
                complete=config.source.startup_mode == "initial",
            ),
            Healing(
                StagedBackfills(name, BackfillLedger(store), functools.partial(_read_changes, config)),
                repairs,
                on_backfill=print_backfill if progress is not None else None,
            ),
            BatchHooks(
                before_batch=lambda: _hold(store, name, held, fence, writers.values(), planning),
                on_batch=on_batch,
                anchor=BinlogAnchor(config, store, ids.end, ready.server.version.flavor),
            ),
            merge_from=config.stream.merge_from(config.pipeline.spark.master),
        )  # fmt: skip
        _hold(store, name, held, fence, ())
        healer = Healer(config, spark, repairs, fence.check) if repairs.heal else None
        with (
            frozen_heap(),
            healer or contextlib.nullcontext(),
            metrics or contextlib.nullcontext(),
        ):  # frozen: what lives now outlives the stream
            run_query(config, spark, applier, start.offset, ready.origin, until_caught_up, stop)
            if until_caught_up and healer is not None:
                _heal_before_ending(config, spark, applier, healer, start.offset, ready.origin, stop)
        for writer in writers.values():
            writer.settle()  # the last batch's upkeep: its error is the stream's
        report.seconds = time.monotonic() - started
        return report
    finally:
        for writer in writers.values():
            writer.upkeep.wait()  # nothing of the stream's runs on once it has stopped
        store.leases(name).release_all(held, fence.lease.holder)


#: Catch-ups a run ``until_caught_up`` makes at most to apply the backfills that heal its gaps (a
#: workload that keeps making gaps would keep it running).
HEALING_ROUNDS = 5


def _heal_before_ending(
    config: PipelineConfig,
    spark: Any,
    applier: BatchApplier,
    healer: Healer,
    start: BinlogOffset,
    origin: BinlogOffset,
    stop: threading.Event | None,
) -> None:
    """A run until caught up ends with its gaps healed: read their backfills now, then catch up
    again (which applies them)."""
    for _ in range(HEALING_ROUNDS):
        if not healer.repairs.healing() or (stop is not None and stop.is_set()):
            return
        healer.heal_once()
        run_query(config, spark, applier, start, origin, True, stop)
    left = healer.repairs.healing()
    if left:
        log.warning(
            "still healing %s after %d catch-ups: held back (behind, never wrong); the next run goes on",
            ", ".join(map(str, left)), HEALING_ROUNDS,
        )  # fmt: skip


def _cascades(config: PipelineConfig) -> Callable[[TableId], bool]:
    def cascades(table: TableId) -> bool:
        with contextlib.closing(connect(config.source)) as conn:
            return bool(cascading_keys(conn, [table]))

    return cascades


def _read_changes(
    config: PipelineConfig, schema: CreateTable, start: BinlogOffset, end: BinlogOffset
) -> pa.Table:
    """One table's changes in (start, end], read in the driver (a backfill's roll-forward).

    It runs inside a batch, when the batch's segment readers are done and no read-ahead runs
    (``READERS``): the first id is free.
    """
    tables = json.dumps({schema.table.name: table_to_dict(schema)})
    with READERS:  # a read-ahead's readers would take the same replica id
        batches = list(read_segment(config, 0, start.to_dict(), end.to_dict(), tables))
    envelope = pa.Table.from_batches(batches, schema=ENVELOPE_SCHEMA)
    found = gaps(envelope)
    if found:  # a roll-forward cannot go past a change it cannot replay
        raise StreamError(gap_message(found[0], " A backfill's rows cannot be rolled forward past it."))
    changes = table_changes(envelope)
    return upserts_only(changes.get(schema.table.name, empty_changes(schema)))


def _hold(
    store: StateStore,
    pipeline: str,
    identifiers: list[str],
    fence: Fence,
    writers: Iterable[IcebergWriter],
    planning: HeldReplicaId | None = None,
) -> None:
    """Take or renew the stream's hold on its tables (waiting while maintenance holds one) once
    their upkeep after the last batch is done (``sink/upkeep.py``): a batch finds them at rest;
    and its hold on its planning replica id (``planning``), lost with its connection."""
    for writer in writers:
        writer.settle()
    if planning is not None:
        planning.renew()
    try:
        fence.check()  # a stream that lost its writer lease stops here, not after waiting for tables
        store.leases(pipeline).hold(identifiers, fence.lease.holder, LEASE, wait_s=LEASE_WAIT_S)
    except TableBusyError as e:
        raise StreamError(f"Cannot write {e.lease.table}: {e} Wait for it to finish.") from None


def print_backfill(rows: dict[str, int], at: BinlogOffset) -> None:
    """A line for backfill units applied between batches (a quiet source)."""
    tables = "; ".join(f"{table} {n:,} rows" for table, n in sorted(rows.items()))
    print(f"stream: backfill applied at {at}: {tables}", file=sys.stderr, flush=True)


def print_batch(batch: StreamBatch, report: StreamReport) -> None:
    """One line per micro-batch for people (and logs)."""
    parts = []
    for table, counts in sorted(batch.changes.items()):
        parts.append(f"{table} " + " ".join(f"{op} {n:,}" for op, n in sorted(counts.items())))
    rate = batch.rows / batch.seconds if batch.seconds else 0.0
    lag = f"{batch.lag_s:.1f} s" if batch.lag_s is not None else "-"
    print(
        f"stream batch {batch.batch_id}: {batch.rows:,} changes read in {batch.seconds:.1f} s "
        f"({rate:,.0f} rows/s), lag {lag}, at {batch.end_offset}"
        + (f"; applied: {'; '.join(parts)}" if parts else ""),
        file=sys.stderr,
        flush=True,
    )
