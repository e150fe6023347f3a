"""A writing command's run, fenced: its writer lease claimed at the start, renewed while it runs,
checked by every state-store commit that writes, and released at the end (``state/writers.py``).

``writing`` is the one way a job becomes a pipeline's writer. While it lasts, ``active(pipeline)``
names the fence, which the Iceberg side consults before each commit (``sink/fenced_commits.py``).
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from binlake.config import PipelineConfig
from binlake.state.holders import Holder
from binlake.state.writers import FencedError, WriterLease, Writers

log = logging.getLogger(__name__)

#: How long a writer's lease lasts unless renewed; a quarter of it passes between renewals.
DEFAULT_TTL = dt.timedelta(seconds=60)

_ACTIVE: dict[str, list[Fence]] = {}
_ACTIVE_LOCK = threading.Lock()


class Fence:
    """This process's lease as a pipeline's writer for one command, kept renewed by a thread."""

    def __init__(self, writers: Writers, lease: WriterLease, ttl: dt.timedelta) -> None:
        self.writers = writers
        self.lease = lease
        self.ttl = ttl
        self.lost: FencedError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease {lease.command}", daemon=True)

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    @property
    def command(self) -> str:
        return self.lease.command

    def check(self) -> None:
        """Raise ``FencedError`` unless the lease is still this process's (asks the state store)."""
        if self.lost is not None:
            raise self.lost
        with self.writers.engine.begin() as conn:
            self._check(conn)

    def _check(self, conn: Connection) -> None:
        try:
            self.writers.check(conn, self.lease)
        except FencedError as e:
            self.lost = e
            raise

    def _renew(self) -> None:
        while not self._stop.wait(self.ttl.total_seconds() / 4):
            try:
                self.lease = self.writers.renew(self.lease, self.ttl)
            except FencedError as e:
                self.lost = e
                log.error("%s", e)
                return
            except Exception as e:  # the state store unreachable a while: the next renewal tries again
                log.warning("could not renew the writer lease of `%s`: %s", self.command, e)

    def guard(self, engine: Engine) -> None:
        """Make every transaction on ``engine`` that writes check this fence before it commits."""
        event.listen(engine, "before_cursor_execute", _note_write)
        event.listen(engine, "commit", self._before_commit)

    def unguard(self, engine: Engine) -> None:
        event.remove(engine, "before_cursor_execute", _note_write)
        event.remove(engine, "commit", self._before_commit)

    def _before_commit(self, conn: Connection) -> None:
        if conn.info.pop("binlake_wrote", False) and not conn.info.get("binlake_fence_check"):
            conn.info["binlake_fence_check"] = True  # the check's own SELECT must not recurse
            try:
                self._check(conn)
            finally:
                conn.info.pop("binlake_fence_check", None)


def _note_write(conn: Connection, cursor: Any, statement: str, *args: Any) -> None:
    if not statement.lstrip()[:6].upper().startswith(("SELECT", "PRAGMA")):
        conn.info["binlake_wrote"] = True


@contextmanager
def writing(
    engine: Engine,
    pipeline: str,
    command: str,
    ttl: dt.timedelta = DEFAULT_TTL,
    part: str = "",
    *,
    beside: bool = False,
) -> Iterator[Fence]:
    """Be ``pipeline``'s writer for ``command`` (its ``part`` only, if given: ``Holder.scope``)
    while the block runs (see the module docstring). ``beside``: inside a process that already is
    the pipeline's writer (the stream's healer reads a backfill): the lease is claimed, but the
    process's Iceberg commits stay fenced by the writer it already is (``active``).

    Raises:
        WriterBusyError: another live process is that writer.
    """
    writers = Writers(engine, pipeline)
    fence = Fence(writers, writers.claim(Holder.this_process(command, part), ttl), ttl)
    log.info("%s is the writer of pipeline %s (epoch %d)", fence.command, pipeline, fence.epoch)
    fence.guard(engine)
    fence._thread.start()
    if not beside:
        with _ACTIVE_LOCK:
            _ACTIVE.setdefault(pipeline, []).append(fence)
    try:
        yield fence
    finally:
        if not beside:
            with _ACTIVE_LOCK:
                _ACTIVE[pipeline].remove(fence)
        fence._stop.set()
        fence._thread.join()
        fence.unguard(engine)
        writers.release(fence.lease)


def writer_lease(config: PipelineConfig) -> dt.timedelta:
    """How long a writer's lease of ``config``'s pipeline lasts unless renewed."""
    return dt.timedelta(seconds=config.pipeline.writer_lease_s)


def active(pipeline: str) -> Fence | None:
    """The innermost fence this process holds for ``pipeline`` (None: it writes no such pipeline)."""
    with _ACTIVE_LOCK:
        fences = _ACTIVE.get(pipeline)
        return fences[-1] if fences else None
