"""Read-ahead: while the driver applies a catch-up batch, the executors decode the next one.

Spark runs a stream's micro-batches one after another: the executors decode a batch, then wait
while the driver applies it (copy-on-write merges, the Iceberg commit), then wait again while the
next batch is planned. When a backlog is bigger than a batch, the next batch's range is known
before Spark plans it: it starts where this one ends and is admitted up to
``stream.max_bytes_per_batch`` at the same transaction boundary the source's planning will find
(``stream.segments.admit`` depends only on the start and the binlog). So once a batch's rows are in
the driver, a Spark job of its own decodes the foreseen range, cut into the same segments
(``binlog_source.plan_segments``), while the driver applies.

The read-ahead is a cache, never a second source of truth: the batch Spark plans next is used
from it only when Spark's own record of that batch (its offsets log, written before the batch runs)
ends exactly where the read-ahead does; otherwise the batch is read as usual. Spark's checkpoint,
the sink's offsets and every crash path are unchanged — a batch replayed after a crash is read
anew. Nothing is read ahead across a statement of the binlog (a schema change is applied when its
batch is planned, and changes the schemas the rows decode with), past the position a catch-up
stops at, or for pipelines whose batches merge on the executors (their executors are busy).
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from binlake.config import PipelineConfig
from binlake.faults import crash_point
from binlake.offsets import BinlogOffset
from binlake.source.server.replicas import claimed_server_id
from binlake.spark.binlog_source import Segment, first_highs, plan_segments
from binlake.spark.chunk_jobs import task_error
from binlake.spark.spark_frames import CollectedFrame
from binlake.stream.envelope import SPARK_SCHEMA
from binlake.stream.positions import SourcePositions, config_from_options, config_options, segment_ids

log = logging.getLogger(__name__)

#: Held while the driver's own binlog readers run — a read-ahead (its scan and its segment
#: readers), a backfill's roll-forward: they take the segment readers' replica ids, and the server
#: drops a replica connection when another one comes with the same id. (Spark's batch readers run
#: only once a read-ahead is done, see ``ReadAhead.take``; the planning side has an id of its own.)
READERS = threading.Lock()


@dataclass(frozen=True)
class Foreseen:
    """A read-ahead for Spark's batch ``batch_id``: its end and rows, or None when the binlog did
    not hold a whole batch more to read ahead."""

    batch_id: int
    read: Future[tuple[BinlogOffset, pa.Table] | None]


class ReadAhead:
    """Reads the next catch-up batch while the driver applies the current one.

    Args:
        spark: the session.
        config: the pipeline.
        checkpoint: the query's checkpoint folder (Spark's offsets log says where a batch ends).
        until_caught_up: the query stops at the source's position when Spark starts it; nothing
            is read ahead past the position before (``until``), which is never past Spark's own.
    """

    def __init__(self, spark: Any, config: PipelineConfig, checkpoint: Path, until_caught_up: bool) -> None:
        self.spark = spark
        self.config = config
        self.checkpoint = checkpoint
        self.until = SourcePositions.from_config(config).head() if until_caught_up else None
        self.group = f"binlake-read-ahead-{uuid.uuid4().hex[:8]}"
        self.foreseen: Foreseen | None = None
        self._highs: dict[str, dict[str, Any]] | None = None

    def frame(self, batch: Any, batch_id: int) -> CollectedFrame:
        """Spark's batch ``batch_id`` for the applier: its rows as read ahead, else the batch
        itself; once its rows are in the driver, the next batch is read ahead."""
        end = planned_end(self.checkpoint, batch_id)
        rows = self.take(batch_id, end)
        then = functools.partial(self.after, batch_id, end) if end is not None else None
        return CollectedFrame(batch, then) if rows is None else _ReadFrame(rows, then)

    def take(self, batch_id: int, planned: BinlogOffset | None) -> pa.Table | None:
        """The envelope of Spark's batch ``batch_id``, which Spark planned to end at ``planned``,
        when it was read ahead, else None (read it as usual). Waits for a read-ahead still running
        either way: its readers must be done before the batch's own start (same replica ids)."""
        foreseen, self.foreseen = self.foreseen, None
        if foreseen is None:
            return None
        try:
            read = foreseen.read.result()
        except Exception as e:  # the batch's own read meets the error again, with Spark's report
            said = task_error(e) or type(e).__name__
            log.info("batch %d: the read-ahead failed (%s); reading the batch as usual", batch_id, said)
            return None
        if read is None:
            return None
        end, rows = read
        if foreseen.batch_id != batch_id or planned != end:
            log.info(
                "batch %d: planned to end at %s, read ahead to %s: reading the batch as usual",
                batch_id, planned, end,
            )  # fmt: skip
            return None
        log.info("batch %d: read ahead, while the driver applied the batch before", batch_id)
        crash_point("read-ahead-used")  # the batch replayed after a crash here is read anew
        return rows

    def after(self, batch_id: int, end: BinlogOffset) -> None:
        """Batch ``batch_id``, which ends at ``end``, is in the driver: read the next one ahead
        (in the background) when the binlog holds a whole batch more, without a statement in it."""
        future: Future[tuple[BinlogOffset, pa.Table] | None] = Future()
        read = functools.partial(self._read_after, end, future)
        threading.Thread(target=read, name="binlake-read-ahead", daemon=True).start()
        self.foreseen = Foreseen(batch_id + 1, future)

    def drop(self) -> None:
        """Wait for a read-ahead still running, and use none (a batch read otherwise: its
        readers must not meet the read-ahead's)."""
        foreseen, self.foreseen = self.foreseen, None
        if foreseen is not None:
            _wait(foreseen)

    def close(self) -> None:
        """Stop a read-ahead nobody will use (the stream stopped)."""
        if self.foreseen is not None and not self.foreseen.read.done():
            self.spark.sparkContext.cancelJobGroup(self.group)
        self.drop()

    def _read_after(self, start: BinlogOffset, future: Future[tuple[BinlogOffset, pa.Table] | None]) -> None:
        try:
            with READERS:
                segments, end = self._next(start)
                future.set_result(None if end is None else (end, self._read(segments)))
        except BaseException as e:
            future.set_exception(e)

    def _next(self, start: BinlogOffset) -> tuple[list[Segment], BinlogOffset | None]:
        # A segment reader's id: the planning side scans with the last one meanwhile.
        with claimed_server_id(
            self.config.source, *segment_ids(self.config.source), 0, wait=False
        ) as server_id:
            return self._plan(start, server_id)

    def _plan(self, start: BinlogOffset, server_id: int) -> tuple[list[Segment], BinlogOffset | None]:
        config = self.config
        positions = SourcePositions(
            config.source, server_id, config.pipeline.name, config.pipeline.resolved_state_uri
        )
        head = positions.head()
        limit = head if self.until is None else min(head, self.until)
        end = positions.admit(start, limit, config.stream.max_bytes_per_batch)
        if end is None or any(True for _ in positions.statements(start, end)):
            return [], None  # no whole batch more, or one Spark's planning may cut or handle
        if self._highs is None:
            self._highs = first_highs(config)
        return plan_segments(config, positions, start, end, self._highs), end

    def _read(self, segments: list[Segment]) -> pa.Table:
        # An Arrow job, one task per segment: its tasks run in the Python workers the source's
        # tasks use (an RDD job would start a daemon and workers of its own), and its rows come to
        # the driver as a batch read by Spark does.
        self.spark.sparkContext.setJobGroup(self.group, "binlake: the next batch, read ahead", True)
        task = functools.partial(_read_segments, config_options(self.config), segments)
        ids = self.spark.range(0, len(segments), 1, len(segments))
        table: pa.Table = ids.mapInArrow(task, SPARK_SCHEMA).toArrow()
        return table


class _ReadFrame(CollectedFrame):
    """A batch read ahead: its rows are in the driver already."""

    read_ahead = True

    def _collect(self) -> pa.Table:
        rows: pa.Table = self._frame
        return rows


def _wait(foreseen: Foreseen) -> None:
    try:
        foreseen.read.result()
    except Exception:  # cancelled or failed: nothing of it is used
        log.debug("read-ahead dropped", exc_info=True)


def planned_end(checkpoint: Path, batch_id: int) -> BinlogOffset | None:
    """Where Spark's batch ``batch_id`` ends, from the query's offsets log (``v1``, a line of
    metadata, then the source's offset as its JSON); None when it cannot tell."""
    try:
        lines = (checkpoint / "offsets" / str(batch_id)).read_text(encoding="utf-8").splitlines()
        if len(lines) != 3 or lines[0] != "v1":
            return None
        data = json.loads(lines[2])
        return BinlogOffset(str(data["file"]), int(data["pos"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _read_segments(
    options: dict[str, str], segments: list[Segment], ids: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """An executor task: the segments of its ids, decoded as the source's task decodes them."""
    from binlake.spark.stream_task import read_segment

    config = config_from_options(options)
    for batch in ids:
        for index in batch.column("id").to_pylist():
            s = segments[index]
            yield from read_segment(config, s.index, s.start, s.end, s.tables, s.prepares, s.held)
