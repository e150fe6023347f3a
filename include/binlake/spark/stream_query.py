"""The stream's Spark query: the ``binlake_binlog`` source, ``foreachBatch`` into the applier
(``stream/apply.py``) — with the next batch read ahead while a catch-up batch is applied
(``spark/read_ahead.py``) — its trigger, stopping between batches, and its errors."""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from typing import Any

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset
from binlake.spark.binlog_source import BinlogDataSource
from binlake.spark.chunk_jobs import task_error
from binlake.spark.query_progress import ProgressLog
from binlake.spark.read_ahead import ReadAhead
from binlake.spark.spark_frames import CollectedFrame, SparkBatchFrame
from binlake.state import fencing
from binlake.state.writers import FencedError
from binlake.stream.apply import BatchApplier
from binlake.stream.positions import config_options

log = logging.getLogger(__name__)


class StreamError(BinlakeError):
    """The stream could not run."""


def run_query(
    config: PipelineConfig,
    spark: Any,
    applier: BatchApplier,
    start: BinlogOffset,
    origin: BinlogOffset,
    until_caught_up: bool,
    stop: threading.Event | None,
) -> None:
    """Run the stream's query from ``start`` (its checkpoint named after ``origin``) until caught
    up (``until_caught_up``), stopped between batches (``stop``), or failed (``StreamError``)."""
    name = config.pipeline.name
    spark.dataSource.register(BinlogDataSource)
    options = {**config_options(config), "start": json.dumps({"file": start.file, "pos": start.pos})}
    checkpoint = config.checkpoint_root / name / f"{origin.file}-{origin.pos}"
    frame = spark.readStream.format("binlake_binlog").options(**options).load()
    ahead = ReadAhead(spark, config, checkpoint, until_caught_up) if config.stream.read_ahead else None

    def run_batch(batch: Any, batch_id: int) -> None:
        if applier.merges_on_executors():
            if ahead is not None:
                ahead.drop()  # a batch read by Spark: no read-ahead may run beside its readers
            applier(SparkBatchFrame(batch, config.pipeline.parallelism), batch_id)
        elif ahead is not None:
            applier(ahead.frame(batch, batch_id), batch_id)
        else:
            applier(CollectedFrame(batch), batch_id)

    writer = (
        frame.writeStream.foreachBatch(run_batch)
        .option("checkpointLocation", str(checkpoint))
        .queryName(f"binlake_{name}")
    )
    if until_caught_up:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{config.stream.trigger_interval_s} seconds")
    progress = ProgressLog()
    spark.streams.addListener(progress)
    query = writer.start()
    looked = time.monotonic()
    try:
        while query.isActive:
            if stop is not None and stop.is_set():
                _stop_between_batches(query)
                break
            query.awaitTermination(1)
            _stop_if_fenced(name, query)
            if time.monotonic() - looked >= config.stream.trigger_interval_s:
                looked = time.monotonic()
                _apply_due(applier, query, idle_s=2 * config.stream.trigger_interval_s)
        query.awaitTermination()
        if until_caught_up:
            applier.apply_due()  # backfill units the stream is past, though the source was quiet
    except Exception as e:
        if stop is not None and stop.is_set():
            # Asked to stop, a batch cut off: nothing of it recorded, the next run applies it: clean.
            log.info("stream stopped during a batch; the next run applies it again")
            return
        raise _lost_lease(name) or _stream_error(applier, e) from None
    finally:
        if ahead is not None:
            ahead.close()
        progress.close()
        spark.streams.removeListener(progress)


def _apply_due(applier: BatchApplier, query: Any, idle_s: float) -> None:
    """Backfill units the stream is already past: a quiet source makes no batch to apply them."""
    try:
        applier.apply_due(idle_s)
    except BaseException as e:
        applier.error = e
        query.stop()
        raise


def _stop_between_batches(query: Any, wait_s: float = 600.0) -> None:
    """Stop the query when no micro-batch runs (Spark's stop would cancel the one in flight)."""
    deadline = time.monotonic() + wait_s
    while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
        time.sleep(0.2)
    query.stop()


_LAST_EXCEPTION = re.compile(r"^(?:\w+\.)*\w*(?:Error|Exception): .+$", re.MULTILINE)


def _stop_if_fenced(pipeline: str, query: Any) -> None:
    """A stream whose lease another writer took over (``state/fencing.py``'s renewal found it)
    stops at once, even while no batch runs that would find it."""
    fence = fencing.active(pipeline)
    if fence is not None and fence.lost is not None:
        query.stop()
        raise fence.lost


def _lost_lease(pipeline: str) -> FencedError | None:
    """The real cause when this process lost its writer lease: whatever failed after that (Spark's
    checkpoint log, written meanwhile by the writer that took over, say) only follows from it."""
    fence = fencing.active(pipeline)
    if fence is None:
        return None
    try:
        fence.check()
    except FencedError as e:
        return e
    except Exception:  # the state store unreachable: the query's own error is the one to show
        return None
    return None


def _stream_error(applier: BatchApplier, error: Exception) -> BaseException:
    """binlake's own error behind a failed query: the batch function's, or a task's (Spark's
    whole text — the query's dump and plan — in the debug log only)."""
    log.debug("the stream's query failed: %s", error)
    if isinstance(applier.error, BinlakeError):
        return applier.error
    # A task's error reaches the batch function when it collects the batch's rows.
    message = (task_error(applier.error) if applier.error is not None else None) or task_error(error)
    if message is not None:
        return StreamError(
            f"A stream task failed; nothing of its batch was applied. The task said: {message}"
        )
    cause = applier.error if applier.error is not None else error
    raised = _LAST_EXCEPTION.findall(str(cause))
    if raised:  # another library's error in a Python traceback (the source's side, a task)
        return StreamError(
            f"The stream failed: {raised[-1][:500]}. Nothing of the failed batch was recorded; a rerun "
            "applies it again."
        )
    text = str(cause).strip()
    return StreamError(
        f"The stream failed: {text.splitlines()[0][:500] if text else repr(cause)}. "
        "Nothing of the failed batch was recorded; a rerun applies it again."
    )
