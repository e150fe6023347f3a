"""Spark's own timing of each micro-batch, logged at INFO beside binlake's (``stream.batch_clock``):
how long finding the batch's end took (``latestOffset``: the source's head, its admission by
size, the cut at a schema change), planning, running it (``addBatch``: reading on the executors and
binlake's apply), and Spark's write-ahead log and offset commits."""

from __future__ import annotations

import logging
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

log = logging.getLogger(__name__)


class ProgressLog(StreamingQueryListener):
    """Logs each progress report's durations (``spark.streams.addListener``) until ``close``:
    Spark delivers events on its own thread, and one may come after the query ended."""

    def __init__(self) -> None:
        super().__init__()
        self.open = True

    def close(self) -> None:
        self.open = False

    def onQueryStarted(self, event: Any) -> None:  # noqa: N802 (Spark's names)
        pass

    def onQueryProgress(self, event: Any) -> None:  # noqa: N802
        if not self.open:
            return
        progress = event.progress
        seconds = {name: ms / 1000 for name, ms in sorted(progress.durationMs.items())}
        durations = ", ".join(f"{name} {s:.2f} s" for name, s in seconds.items())
        log.info("batch %d (Spark): %s", progress.batchId, durations, extra={"phases": seconds})

    def onQueryIdle(self, event: Any) -> None:  # noqa: N802
        pass

    def onQueryTerminated(self, event: Any) -> None:  # noqa: N802
        pass
