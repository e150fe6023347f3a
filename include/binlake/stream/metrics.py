"""The stream's metrics for Prometheus (``prometheus_client``): an HTTP endpoint
(``stream.metrics_address``, off by default) and a textfile for node_exporter's textfile collector
(``stream.metrics_textfile``, rewritten whole after each batch — the way for a stream Airflow runs).

Names follow Prometheus' conventions (``binlake_stream_…``; ``_total`` counters, ``_seconds`` and
``_bytes`` units), labelled by ``pipeline`` (and ``table``, ``op``, ``phase``):

- ``binlake_stream_lag_seconds``: how far behind the server the sink is — 0 when the stream has
  applied everything the server's binlog holds, else the age of the newest change applied;
- ``binlake_stream_lag_bytes``: binlog bytes between the stream's position and the server's head;
- ``binlake_stream_changes_read_total`` / ``binlake_stream_changes_applied_total{table,op}``;
- ``binlake_stream_batch_phase_seconds{phase}``: where batches' time goes (read, schemas, prepare,
  commit, state, merge on executors);
- ``binlake_stream_batches_total``, ``binlake_stream_last_batch_timestamp_seconds``;
- ``binlake_stream_read_ahead_batches_total``: batches whose rows were read while the driver
  applied the batch before (``spark/read_ahead.py``; its share of the batches is the hit rate);
- ``binlake_stream_commit_conflicts_total``: commits of sink tables that met another writer's
  commit (refreshed, checked and tried again — a steady rate means something else writes there);
- ``binlake_stream_binlog_file_number`` / ``binlake_stream_binlog_position_bytes``: where the stream
  applied up to (every table not held back is exact there; ``binlake status`` names the held ones);
- ``binlake_stream_table_last_change_timestamp_seconds{table}``: when a change of each table was
  last applied (a table whose changes stop shows here first);
- ``binlake_stream_repairs_open``: tables held back by a gap (healing, or waiting for a backfill);
- ``binlake_stream_writer_epoch``: the fencing epoch of this stream's writer lease;
- the process's own (``process_resident_memory_bytes``, CPU, open files).
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector
from prometheus_client.exposition import start_http_server, write_to_textfile

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset
from binlake.state.offset_names import STREAM
from binlake.state.store import StateStore
from binlake.state.stream_history import StreamBatch

log = logging.getLogger(__name__)

#: Buckets of a batch phase's seconds: a quiet batch takes milliseconds, a catch-up one minutes.
PHASE_BUCKETS = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)
#: Seconds between looks at the server's head (the lag's other end).
LOOK_S = 5.0
#: Bytes behind the head few enough to look at the events there: a gap of this size after the last
#: batch is most often what the server writes between transactions, which is no lag.
LOOK_BYTES = 16 * 1024
#: Events that carry no change (``SHOW BINLOG EVENTS``' names, MariaDB's and MySQL's).
HOUSEKEEPING = frozenset(
    {"Rotate", "Format_desc", "Gtid_list", "Binlog_checkpoint", "Previous_gtids", "Stop", "Start_encryption"}
)


class MetricsAddressError(BinlakeError):
    """The metrics endpoint could not listen where configured."""


class StreamMetrics:
    """One stream run's metrics, in a registry of its own (a process may run several streams)."""

    def __init__(self, pipeline: str) -> None:
        self.pipeline = pipeline
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        labels = ["pipeline"]

        def gauge(name: str, text: str) -> Any:
            return Gauge(name, text, labels, registry=self.registry).labels(pipeline)

        self.lag_seconds = gauge("binlake_stream_lag_seconds", "Seconds the sink is behind the source")
        self.lag_bytes = gauge("binlake_stream_lag_bytes", "Binlog bytes between the stream and the server")
        self.last_batch = gauge("binlake_stream_last_batch_timestamp_seconds", "When the last batch ended")
        self.repairs_open = gauge("binlake_stream_repairs_open", "Tables held back by a gap")
        self.file_number = gauge("binlake_stream_binlog_file_number", "Binlog file the stream applied up to")
        self.position = gauge("binlake_stream_binlog_position_bytes", "Position in that file applied up to")
        self.table_applied = Gauge(
            "binlake_stream_table_last_change_timestamp_seconds", "When a change of a table was last applied",
            [*labels, "table"], registry=self.registry,
        )  # fmt: skip
        self.epoch = gauge("binlake_stream_writer_epoch", "Fencing epoch of the stream's writer lease")
        self.read = Counter(
            "binlake_stream_changes_read", "Row changes read from the binlog", labels, registry=self.registry
        ).labels(pipeline)
        self.batches = Counter(
            "binlake_stream_batches", "Micro-batches committed", labels, registry=self.registry
        ).labels(pipeline)
        self.read_ahead = Counter(
            "binlake_stream_read_ahead_batches", "Batches read while the one before was applied",
            labels, registry=self.registry,
        ).labels(pipeline)  # fmt: skip
        self.conflicts = Counter(
            "binlake_stream_commit_conflicts", "Commit conflicts met (refreshed, checked, tried again)",
            labels, registry=self.registry,
        ).labels(pipeline)  # fmt: skip
        self.applied = Counter(
            "binlake_stream_changes_applied", "Row changes applied to sink tables",
            [*labels, "table", "op"], registry=self.registry,
        )  # fmt: skip
        self.phases = Histogram(
            "binlake_stream_batch_phase_seconds", "Seconds of a batch's phases",
            [*labels, "phase"], buckets=PHASE_BUCKETS, registry=self.registry,
        )  # fmt: skip
        self._newest_event: float | None = None
        self._position: BinlogOffset | None = None

    def batch(self, batch: StreamBatch, phases: dict[str, float]) -> None:
        """A committed batch: its counts, phases and position."""
        self.batches.inc()
        self.read.inc(batch.rows)
        self.read_ahead.inc(1 if batch.read_ahead else 0)  # 0 too: the series exists from the start
        self.conflicts.inc(batch.conflicts)
        for table, ops in batch.changes.items():
            for op, n in ops.items():
                self.applied.labels(self.pipeline, table, op).inc(n)
        for phase, seconds in _phases(phases).items():
            self.phases.labels(self.pipeline, phase).observe(seconds)
        self.last_batch.set(batch.finished_at.timestamp())
        for table in batch.changes:
            self.table_applied.labels(self.pipeline, table).set(batch.finished_at.timestamp())
        self.file_number.set(batch.end_offset.sequence)
        self.position.set(batch.end_offset.pos)
        if batch.lag_s is not None:
            self._newest_event = batch.finished_at.timestamp() - batch.lag_s
        self._position = batch.end_offset

    def lag(self, behind_bytes: int | None, position: BinlogOffset | None = None) -> None:
        """The server's head against the stream's position: bytes behind, and seconds (0 once the
        stream holds everything the binlog does)."""
        if position is not None:
            self._position = position
        if behind_bytes is None:
            return
        self.lag_bytes.set(behind_bytes)
        if behind_bytes <= 0:
            self.lag_seconds.set(0)
        elif self._newest_event is not None:
            self.lag_seconds.set(max(0.0, time.time() - self._newest_event))

    def write_textfile(self, path: Path) -> None:
        """The metrics as a textfile (written aside and renamed: a collector never reads half)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(path), self.registry)


def _phases(spent: dict[str, float]) -> dict[str, float]:
    """Phases by kind: each sink table's ``commit db.t`` counts as ``commit``."""
    found: dict[str, float] = {}
    for name, seconds in spent.items():
        kind = re.sub(r"^commit .*", "commit", name)
        found[kind] = found.get(kind, 0.0) + seconds
    return found


class MetricsServer:
    """The endpoint and the lag poller of one stream run (a context manager; both stop with it)."""

    def __init__(
        self,
        metrics: StreamMetrics,
        address: str | None,
        textfile: Path | None,
        behind: Callable[[], tuple[int | None, BinlogOffset | None]],
        repairs: Callable[[], int],
    ) -> None:
        self.metrics = metrics
        self.address = address
        self.textfile = textfile
        self.behind = behind
        self.repairs = repairs
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="binlake metrics", daemon=True)
        self._server: Any = None

    def __enter__(self) -> MetricsServer:
        self.look()  # the lag from the start: a gauge nothing has set yet reads 0, "caught up"
        if self.address:
            host, _, port = self.address.rpartition(":")
            try:
                self._server, _ = start_http_server(int(port), host or "0.0.0.0", self.metrics.registry)
            except (OSError, ValueError) as e:
                raise MetricsAddressError(
                    f"Cannot serve the stream's metrics on `{self.address}` (`stream.metrics_address`): {e}. "
                    "Fix: choose a free port (host:port), or leave the setting out."
                ) from None
            log.info("metrics of %s on http://%s/metrics", self.metrics.pipeline, self.address)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.look()  # the last figures, for the textfile a batch job leaves behind
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def after_batch(self, batch: StreamBatch, phases: dict[str, float]) -> None:
        self.metrics.batch(batch, phases)
        if self.textfile is not None:
            self.metrics.write_textfile(self.textfile)

    def look(self) -> None:
        """Ask the server's head (lag) and the state store (repairs); never stops the stream."""
        try:
            behind, position = self.behind()
            self.metrics.lag(behind, position)
            self.metrics.repairs_open.set(self.repairs())
            if self.textfile is not None:
                self.metrics.write_textfile(self.textfile)
        except Exception as e:  # a metric missed, logged: the stream goes on
            log.warning("could not update the stream's metrics: %s", e)

    def _poll(self) -> None:
        while not self._stop.wait(LOOK_S):
            self.look()


def bytes_behind(head: BinlogOffset, position: BinlogOffset, sizes: dict[str, int]) -> int:
    """Binlog bytes from ``position`` to ``head`` (``sizes``: each binlog file's size, from
    ``SHOW BINARY LOGS``)."""
    if position >= head:
        return 0
    if position.file == head.file:
        return head.pos - position.pos
    between = sum(size for name, size in sizes.items() if position.file < name < head.file)
    return max(0, sizes.get(position.file, position.pos) - position.pos) + between + head.pos


def source_behind(
    source: Any, position: Callable[[], BinlogOffset | None]
) -> tuple[int | None, BinlogOffset | None]:
    """Bytes from the stream's stored position to the server's head (None: not known yet)."""
    from binlake.source.server.connection import connect  # the planning side never imports this module

    at = position()
    if at is None:
        return None, None
    with contextlib.closing(connect(source)) as conn, conn.cursor() as cursor:
        cursor.execute("SHOW BINARY LOGS")
        sizes = {str(r[0]): int(r[1]) for r in cursor.fetchall()}
        cursor.execute("SHOW MASTER STATUS")
        row = cursor.fetchone()
        if row is None:
            return None, at
        head = BinlogOffset(str(row[0]), int(row[1]))
        behind = bytes_behind(head, at, sizes)
        if 0 < behind <= LOOK_BYTES and _housekeeping_only(cursor, at, head, sizes):
            behind = 0  # a rotation or a checkpoint since the last batch: nothing to apply
    return behind, at


def _housekeeping_only(cursor: Any, at: BinlogOffset, head: BinlogOffset, sizes: dict[str, int]) -> bool:
    """Whether the binlog from ``at`` to ``head`` holds only events that are no change (the server
    writes a rotation, a format description, a GTID list or a binlog checkpoint when it pleases,
    after the last transaction). False when the server will not list them (a privilege)."""
    between = {f: BinlogOffset(f, 0).sequence for f in sizes}
    files = sorted(
        (f for f, n in between.items() if at.sequence <= n <= head.sequence), key=between.__getitem__
    )
    try:
        for file in files:
            cursor.execute("SHOW BINLOG EVENTS IN %s FROM %s", (file, at.pos if file == at.file else 4))
            for _, pos, kind, *_ in cursor.fetchall():
                if file == head.file and int(pos) >= head.pos:
                    break
                if str(kind) not in HOUSEKEEPING:
                    return False
    except Exception as e:  # counted as bytes behind, as before
        log.debug("could not list the binlog's events after %s: %s", at, e)
        return False
    return True


def stream_metrics(
    config: PipelineConfig, store: StateStore, held: Callable[[], int], epoch: int
) -> MetricsServer | None:
    """The metrics of ``config``'s stream, if it asks for any (``stream.metrics_*``)."""
    stream = config.stream
    if stream.metrics_address is None and stream.metrics_textfile is None:
        return None
    metrics = StreamMetrics(config.pipeline.name)
    metrics.epoch.set(epoch)
    name = config.pipeline.name
    return MetricsServer(
        metrics,
        stream.metrics_address,
        stream.metrics_textfile,
        lambda: source_behind(config.source, lambda: store.offsets(name).load(STREAM)),
        held,
    )
