"""The server's replicas: the replica ids a pipeline's binlog readers use must be their own.

Two readers with one id kick each other off the server (it drops a dump connection when another
comes with the same id), which looks like a flaky network. binlake's readers register by name
(``source.replica_label``, ``binlake:<pipeline>``), so ``SHOW SLAVE HOSTS`` tells them apart from
another pipeline's or a real replica. Chunk readers, as many as Spark runs tasks at once, claim
their id (``claimed_server_id``).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pymysql

from binlake.config import SourceConfig
from binlake.errors import SourceConnectionError
from binlake.source.server.checks import Check
from binlake.source.server.connection import ServerVersion, connect

if TYPE_CHECKING:
    from binlake.config import PipelineConfig

log = logging.getLogger(__name__)

_NO_PRIVILEGE = (1227, 1142, 1044)
#: The longest idle time MySQL and MariaDB accept (a year): a claim's connection sits idle while
#: its reader works, and one closed by the server's ``wait_timeout`` would free the id silently.
_IDLE_FOR_GOOD_S = 31_536_000


def replica_ids(config: PipelineConfig) -> set[int]:
    """Every replica id the pipeline's readers may use: the stream's range, its quality reader,
    the backfill's and verify's readers."""
    source, parallelism = config.source, config.pipeline.parallelism
    ids = set(range(source.server_id.start, source.server_id.end + 2))  # +1: the quality reader
    first, last = (
        int(i) for i in config.backfill.reader_server_ids(source.server_id.end, parallelism).split("-")
    )
    ids |= set(range(first, last + 1))
    verify = config.verify.reader_server_id(source.server_id.end)
    return ids | set(range(verify, verify + parallelism + 1))


def replica_check(conn: Any, version: ServerVersion, config: PipelineConfig) -> Check:
    """Whether a replica connected to the server (another pipeline's reader, a real replica) uses
    one of the pipeline's replica ids."""
    statement = (
        "SHOW REPLICAS" if version.flavor == "mysql" and version.number >= (8, 0, 22) else "SHOW SLAVE HOSTS"
    )
    try:
        with conn.cursor() as cur:
            cur.execute(statement)
            names = [str(d[0]).lower() for d in cur.description]
            rows = [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
    except pymysql.err.MySQLError as e:
        if e.args and e.args[0] in _NO_PRIVILEGE:
            return Check(
                "replica_ids",
                "warning",
                f"cannot list the server's replicas (`{statement}` was refused), so a replica id in use "
                "elsewhere is not found before it kicks a reader off",
                "grant REPLICATION MASTER ADMIN (MariaDB 10.5+) or REPLICATION SLAVE (MySQL) to the user",
            )
        raise
    ours, label = replica_ids(config), config.source.replica_label
    clashes = sorted(
        (int(r["server_id"]), str(r.get("host") or "")) for r in rows
        if int(r["server_id"]) in ours and (r.get("host") or "") != label
    )  # fmt: skip
    if clashes:
        who = "; ".join(f"id {i} by {_who(host)}" for i, host in clashes)
        return Check(
            "replica_ids",
            "error",
            f"replica ids of this pipeline are in use: {who}. Two readers with one id kick each other "
            "off the server",
            f"give `source.server_id` a range no other replica uses (now {config.source.server_id.start}-"
            f"{config.source.server_id.end}; the backfill and verify readers take the ids after it)",
        )
    return Check("replica_ids", "ok", f"no other replica uses this pipeline's ids ({len(rows)} connected)")


def _who(host: str) -> str:
    if host.startswith("binlake:"):
        return f"the binlake pipeline `{host.removeprefix('binlake:')}`"
    return f"a replica at `{host}`" if host else "a replica that reports no host"


@contextlib.contextmanager
def claimed_server_id(
    source: SourceConfig, first: int, last: int, preferred: int, wait: bool = True
) -> Iterator[int]:
    """A replica id of ``first``-``last`` that no other reader holds, for as long as the context
    lasts.

    Each id is a named lock on the server (``GET_LOCK``), held by a connection of its own: the
    server releases it when the reader ends, even killed, and never for the connection's idling,
    however long the reader runs (the stream holds its planning id for as long as it streams).
    ``preferred`` (a task's index) spreads the readers over the range. When every id is held, the
    reader waits for one to be freed, so at most ``last - first + 1`` readers run at once however
    many tasks Spark runs at once (on a cluster with more cores than ``pipeline.parallelism``:
    before, two tasks could share an id and kick each other's binlog reads off the server).

    ``wait=False`` (the stream's readers): when every id is held, the preferred one is used all
    the same. A paused process holds its locks as long as its connections live — a stream that
    lost its writer lease while stopped, say — and the stream that took over must not wait for it.
    """
    ids = list(range(first, last + 1))
    start = preferred % len(ids)
    order = ids[start:] + ids[:start]
    with contextlib.closing(_claiming(source)) as conn:
        claimed = _first_free(conn, order)
        if claimed is None and not wait:
            log.warning(
                "replica ids %d-%d are all held by other readers (a paused process of this pipeline, or a "
                "snapshot's chunk readers): reading with %d all the same; readers sharing an id kick each "
                "other off the server until one ends",
                first, last, order[0],
            )  # fmt: skip
            claimed = order[0]
        if claimed is None:
            log.info("replica ids %d-%d are all in use by other readers: waiting", first, last)
        while claimed is None:  # the preferred id, or whichever is freed first
            claimed = order[0] if _lock(conn, order[0], 1) else _first_free(conn, order)
        yield claimed


class HeldReplicaId:
    """The replica id a reader holds for as long as it runs (the stream's planning side), claimed
    as ``claimed_server_id`` claims it without waiting, and claimed again by ``renew`` once its
    connection is gone: a server restart or a network cut ends the connection, and the server
    frees the id with it."""

    def __init__(self, source: SourceConfig, server_id: int) -> None:
        self.source = source
        self.server_id = server_id
        self._conn: Any = None
        self._held = False

    def __enter__(self) -> HeldReplicaId:
        self._claim()
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()

    def renew(self) -> None:
        """Claim the id again if its connection was lost, or if another reader held it at the last
        claim and has freed it since (a ping a batch: well under a millisecond). A server that
        cannot be reached now is tried again at the next renewal: the stream's own reads say
        whether the server is gone, with their retries and errors."""
        if self._conn is not None:  # None: lost before, not claimed since
            try:
                self._conn.ping(reconnect=False)
                if not self._held and _lock(self._conn, self.server_id, 0):
                    self._held = True
                    log.info("replica id %d is claimed: the reader that held it is gone", self.server_id)
                return
            except pymysql.err.Error:
                self._close()
        log.info("the connection holding replica id %d was lost: claiming it again", self.server_id)
        try:
            self._claim()
        except (SourceConnectionError, pymysql.err.Error) as e:
            log.warning(
                "replica id %d cannot be claimed again now (%s): trying at the next batch", self.server_id, e
            )

    def _claim(self) -> None:
        self._conn = _claiming(self.source)
        self._held = _lock(self._conn, self.server_id, 0)
        if not self._held:
            log.warning(
                "replica id %d is held by another reader (a paused process of this pipeline, or a "
                "snapshot's chunk reader): reading with it all the same; readers sharing an id kick each "
                "other off the server until one ends",
                self.server_id,
            )

    def _close(self) -> None:
        conn, self._conn, self._held = self._conn, None, False
        if conn is not None:
            with contextlib.suppress(pymysql.err.Error):
                conn.close()


def _claiming(source: SourceConfig) -> Any:
    """A connection for named locks, exempt from the server's ``wait_timeout``."""
    conn = connect(source)
    with conn.cursor() as cur:
        cur.execute(f"SET SESSION wait_timeout = {_IDLE_FOR_GOOD_S}")
    return conn


def _first_free(conn: Any, order: list[int]) -> int | None:
    return next((i for i in order if _lock(conn, i, 0)), None)


def _lock(conn: Any, server_id: int, seconds: int) -> bool:
    with conn.cursor() as cur:
        cur.execute("SELECT GET_LOCK(%s, %s)", (f"binlake:replica_id:{server_id}", seconds))
        (got,) = cur.fetchone()
    return bool(got == 1)
