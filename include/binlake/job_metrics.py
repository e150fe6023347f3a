"""Metrics of the snapshot, backfill and verify jobs for Prometheus: a textfile each run rewrites as
it goes and leaves behind when it ends (``pipeline.metrics_dir``; node_exporter's textfile collector
reads it) — Prometheus' way for batch jobs, with no push gateway to run.

Gauges of the newest run, named ``binlake_<job>_…`` and labelled by ``pipeline`` and ``part`` (the
part of the job a process ran: Airflow maps a snapshot onto several tasks, each with a file of its
own; empty for a whole run):

- ``_rows{table}``: rows read (snapshot), staged (backfill) or compared (verify) so far;
- ``_chunks{table,state}``: chunks by state — snapshot ``planned``/``done``, backfill ``read``,
  verify by verdict (``equal``, ``drifted``, ``unverified``, ``repaired``);
- ``_running`` (1 while the run goes), ``_success`` (1: it ended well; 0: it failed or goes on),
  ``_duration_seconds``, ``_end_timestamp_seconds``.
"""

from __future__ import annotations

import contextlib
import hashlib
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Literal

from prometheus_client import CollectorRegistry, Gauge
from prometheus_client.exposition import write_to_textfile

Job = Literal["snapshot", "backfill", "verify"]
#: Seconds between rewrites of the file while a run progresses (its end always writes).
EVERY_S = 5.0


class JobMetrics:
    """One run's metrics; without a folder, nothing is written."""

    def __init__(self, job: Job, pipeline: str, folder: Path | None, part: str = "") -> None:
        self.labels = (pipeline, _short(part))
        suffix = f"_{self.labels[1]}" if part else ""
        self.path = folder / f"binlake_{pipeline}_{job}{suffix}.prom" if folder else None
        self.registry = CollectorRegistry()
        names = ["pipeline", "part"]

        def gauge(name: str, text: str, extra: tuple[str, ...] = ()) -> Gauge:
            return Gauge(f"binlake_{job}_{name}", text, [*names, *extra], registry=self.registry)

        self.rows = gauge("rows", f"Rows of the {job} run so far, per table", ("table",))
        self.chunks = gauge("chunks", f"Chunks of the {job} run by state, per table", ("table", "state"))
        self.running = gauge("running", f"1 while a {job} run goes").labels(*self.labels)
        self.success = gauge("success", f"1 when the {job} run ended well").labels(*self.labels)
        self.duration = gauge("duration_seconds", f"Seconds of the {job} run").labels(*self.labels)
        self.ended = gauge("end_timestamp_seconds", f"When the {job} run ended").labels(*self.labels)
        self._started = time.monotonic()
        self._written = 0.0

    def observe(self, rows: Mapping[str, int], chunks: Mapping[str, Mapping[str, int]]) -> None:
        """The run's figures so far (each table's rows; its chunks by state)."""
        for table, n in rows.items():
            self.rows.labels(*self.labels, table).set(n)
        for table, states in chunks.items():
            for state, n in states.items():
                self.chunks.labels(*self.labels, table, state).set(n)
        self.duration.set(time.monotonic() - self._started)
        if time.monotonic() - self._written >= EVERY_S:
            self._write()

    @contextlib.contextmanager
    def run(self) -> Iterator[JobMetrics]:
        """Around the run: running while it goes, then its outcome and end, written either way."""
        self._started = time.monotonic()
        self.running.set(1)
        self._write()
        ok = False
        try:
            yield self
            ok = True
        finally:
            self.running.set(0)
            self.success.set(1 if ok else 0)
            self.duration.set(time.monotonic() - self._started)
            self.ended.set(time.time())
            self._write()

    def _write(self) -> None:
        if self.path is None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(self.path), self.registry)  # written aside and renamed: never half read
        self._written = time.monotonic()


def _short(part: str) -> str:
    """A part's label and file suffix: short and safe in a file name, the same for the same part."""
    return hashlib.sha256(part.encode()).hexdigest()[:12] if part else ""
