"""A streamed table's upkeep after each batch commit: compaction (or, without one, a manifest
merge), then snapshot expiry — in the background, while the stream reads its next batch.

Upkeep is what keeps a table's commits from slowing down as batches accumulate
(``sink/compaction.py``, ``sink/snapshot_retention.py``), but once compaction reaches its steady
state (files losing rows as fast as it rewrites them), it costs more than the batch itself:
``bench/merge.py``, 100 batches of 10k changes into 1M rows, 0.15-0.2 s per batch in the first ten,
0.4-1.3 s in the batches that compact. Paimon's writers compact asynchronously for that reason. So
the stream's writers run their upkeep in a thread of their own once a batch has committed, and
the next batch of the table waits for it before it touches the table (``settle``): the work
overlaps the executors' read of the next batch instead of adding to it.

Nothing runs beside the upkeep on its table: every commit of the writer, and every batch of the
stream (schema changes included), settles first; the stream settles every writer before it ends.
Upkeep changes no row and keeps the stream's offset; a commit of its that conflicts is dropped
(``compaction``), so it is safe to lose at any point (a killed process leaves files no snapshot
names, for ``binlake maintain``). An error in it (not a conflict) is raised by the next settle, so
it stops the stream as it did when upkeep ran inline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

log = logging.getLogger(__name__)


class Upkeep:
    """Runs one table's upkeep after a commit: at once, or in the background (``background``)."""

    def __init__(self, name: str, background: bool) -> None:
        self.name = name
        self.background = background
        self.seconds = 0.0
        """How long the last upkeep took."""
        self.waited = 0.0
        """How long the last ``settle`` waited for it."""
        self._pool: ThreadPoolExecutor | None = None
        self._running: Future[None] | None = None
        self._lock = threading.Lock()

    def start(self, work: Callable[[], None]) -> None:
        """Run ``work`` (after the last upkeep, which must be settled)."""
        if not self.background:
            self._timed(work)
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix=f"upkeep-{self.name}")
            self._running = self._pool.submit(self._timed, work)

    def settle(self) -> None:
        """Wait for the upkeep under way, if any; raise its error."""
        with self._lock:
            running, self._running = self._running, None
        if running is None:
            self.waited = 0.0
            return
        started = time.monotonic()
        try:
            running.result()
        finally:
            self.waited = time.monotonic() - started
            if self.waited >= 0.05:
                log.info("waited %.2f s for the upkeep of %s (it took %.2f s)", self.waited, self.name,
                         self.seconds)  # fmt: skip

    def wait(self) -> None:
        """``settle``, an error logged instead of raised (on the way out of a stream that failed)."""
        try:
            self.settle()
        except Exception:
            log.exception("the upkeep of %s failed", self.name)

    def _timed(self, work: Callable[[], None]) -> None:
        started = time.monotonic()
        try:
            work()
        finally:
            self.seconds = time.monotonic() - started
