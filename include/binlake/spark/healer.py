"""The stream's healer (``stream.on_gap: backfill``): beside the running stream, in its process and
Spark session, it reads the backfills that repair the gaps the stream met (``stream/repairs.py``:
each gap opened a repair for a backfill that does not exist yet). The stream applies a staged
backfill like any other, which closes the repair; the table waits meanwhile, no other table does.

The repairs are in the state store, so a stream restarted after a crash heals what its
predecessor had not: the planning side (another Python process) opens repairs too."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import TableId
from binlake.faults import crash_point
from binlake.spark.backfill_job import run_backfill
from binlake.stream.repairs import StreamRepairs

log = logging.getLogger(__name__)

#: Seconds between looks for repairs waiting for their backfill, and before a failed one is tried again.
LOOK_S = 2.0
RETRY_S = 30.0


class Healer:
    """Reads the backfills of open healing repairs, one at a time, in a thread of its own."""

    def __init__(
        self,
        config: PipelineConfig,
        spark: Any,
        repairs: StreamRepairs,
        check: Callable[[], None] = lambda: None,
    ) -> None:
        self.config = config
        self.spark = spark
        self.repairs = repairs
        self.check = check
        """Raises when the stream may no longer write (its lease lost): nothing more is read."""
        self.healed: list[str] = []
        self.error: BinlakeError | None = None
        """The last backfill's failure (tried again after ``RETRY_S``); None after a success."""
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one reader of a backfill: the thread, or a caller waiting
        self._thread = threading.Thread(target=self._run, name="binlake healer", daemon=True)

    def __enter__(self) -> Healer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def waiting(self) -> list[tuple[TableId, str]]:
        """Gaps whose backfill is not read yet (table, backfill id)."""
        return self.repairs.unread_heals()

    def heal_once(self) -> int:
        """Read every backfill a healing repair waits for; how many were read."""
        with self._lock:
            return self._heal()

    def _heal(self) -> int:
        read = 0
        for table, backfill_id in self.waiting():
            if self._stop.is_set():
                break
            self.check()
            log.info("healing %s: reading backfill `%s`", table, backfill_id)
            report = run_backfill(self.config, self.spark, backfill_id, [table.name], beside_stream=True)
            log.info(
                "healing %s: backfill `%s` staged (%d units); the stream applies it once past its "
                "high watermark", table, backfill_id, report.staged,
            )  # fmt: skip
            crash_point("heal-staged")  # staged, not applied: a restart applies it
            self.healed.append(backfill_id)
            read += 1
        return read

    def _run(self) -> None:
        pause = LOOK_S
        while not self._stop.wait(pause):
            try:
                self.heal_once()
                self.error, pause = None, LOOK_S
            except BinlakeError as e:
                self.error, pause = e, RETRY_S
                log.error("healing failed (tried again in %.0f s): %s", RETRY_S, e)
            except Exception as e:  # the stream goes on; its table stays held, behind but exact
                self.error, pause = BinlakeError(f"{type(e).__name__}: {e}"), RETRY_S
                log.error("healing failed (tried again in %.0f s): %s: %s", RETRY_S, type(e).__name__, e)
