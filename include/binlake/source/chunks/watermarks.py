"""Binlog watermarks: the source's current binlog offset, read without any lock.

MySQL 8.2 renamed ``SHOW MASTER STATUS`` to ``SHOW BINARY LOG STATUS`` and 8.4 removed the old
name; MariaDB (10.11 included) knows only the old one. MariaDB's GTID position comes from
``@@gtid_binlog_pos``; MySQL's GTID set is a column of the status row.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset, gtid_matcher
from binlake.source.server.connection import ServerVersion

#: First MySQL version that has SHOW BINARY LOG STATUS (8.4 no longer has SHOW MASTER STATUS).
BINARY_LOG_STATUS_SINCE = (8, 2, 0)


class BinlogDisabledError(BinlakeError):
    """The server writes no binlog, so there is no offset to read."""


class _Cursor(Protocol):
    description: Any

    def execute(self, query: str, args: Any = ...) -> Any: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> Any: ...


class _Connection(Protocol):
    def cursor(self) -> Any: ...


def status_statement(version: ServerVersion) -> str:
    """The statement that shows the current binlog file and position on this server."""
    if version.flavor == "mysql" and version.number >= BINARY_LOG_STATUS_SINCE:
        return "SHOW BINARY LOG STATUS"
    return "SHOW MASTER STATUS"


def current_offset(conn: _Connection, version: ServerVersion) -> BinlogOffset:
    """The binlog offset after the last committed transaction (a transaction boundary).

    Raises:
        BinlogDisabledError: the server has no binlog (``log_bin`` is off).
    """
    with conn.cursor() as cur:
        cur.execute(status_statement(version))
        row = cur.fetchone()
        if not row:
            raise BinlogDisabledError(
                f"Could not read the binlog position of the source ({version}): "
                f"`{status_statement(version)}` returned nothing, so the binary log is off. "
                "Fix: add `log_bin = binlog` under [mysqld] in my.cnf and restart the server."
            )
        names = [d[0].lower() for d in cur.description]
        status = dict(zip(names, row, strict=False))
        gtid: str | None = None
        if version.flavor == "mariadb":
            cur.execute("SELECT @@gtid_binlog_pos")
            value = cur.fetchone()
            gtid = str(value[0]) if value and value[0] else None
        else:
            executed = status.get("executed_gtid_set")
            gtid = str(executed).replace("\n", "") if executed else None
    return BinlogOffset(str(status["file"]), int(status["position"]), gtid)


#: A transaction boundary and its GTID (None where the server writes none), for ``LowWatermark``.
GtidBoundaries = Callable[[BinlogOffset, BinlogOffset], Iterable[tuple[BinlogOffset, str | None]]]


class LowWatermark:
    """A chunk read's low watermark: an offset whose every transaction the SELECT after it sees.

    ``SHOW MASTER STATUS`` is not that offset: a server writes a commit group to the binlog before
    the storage engine makes it visible — for one fsync normally, and with semi-synchronous
    replication (``AFTER_SYNC``) until a replica acknowledges it or the wait times out (seconds).
    A SELECT in that window misses the transaction, and a binlog replay from that status offset
    misses it too: the chunk would lose it. So the low watermark is the last offset the engine has
    made visible (the binlog replay from it repeats what the SELECT may already hold, which is
    harmless by key; a keyless chunk is read again in a consistent snapshot):

    - MariaDB (and Percona Server): ``Binlog_snapshot_file/position`` — the last transaction the
      engine committed (it stays behind a semi-sync commit that waits);
    - MySQL with GTIDs: the boundary before the first transaction up to the status offset whose
      GTID is not yet in ``gtid_executed`` (MySQL adds a GTID after the engine commit);
    - MySQL without GTIDs: the status offset read ``lag_s`` seconds earlier (one second more than
      the semi-sync timeout, when semi-sync waits after the sync); the first read waits that long.

    Args:
        boundaries: the transaction boundaries of a binlog range with their GTIDs (MySQL only).
        clock, sleep: time, for tests.
    """

    def __init__(
        self,
        boundaries: GtidBoundaries,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._boundaries = boundaries
        self._clock = clock
        self._sleep = sleep
        self._mode: str | None = None
        self._lag_s = 1.0
        self._readings: list[tuple[float, BinlogOffset]] = []
        self._visible: BinlogOffset | None = None

    def read(self, conn: _Connection, version: ServerVersion) -> BinlogOffset:
        """The low watermark now (see the class docstring)."""
        if self._mode is None:
            self._mode = self._choose(conn, version)
        if self._mode == "snapshot":
            return _snapshot_offset(conn)
        head = current_offset(conn, version)
        if self._mode == "gtid":
            return self._before_invisible(conn, head)
        return self._lagged(head)

    def _choose(self, conn: _Connection, version: ServerVersion) -> str:
        with conn.cursor() as cur:
            cur.execute("SHOW GLOBAL STATUS LIKE 'binlog_snapshot_position'")
            if cur.fetchone():
                return "snapshot"
            cur.execute("SHOW GLOBAL VARIABLES WHERE Variable_name IN ('gtid_mode', "
                        "'rpl_semi_sync_source_enabled', 'rpl_semi_sync_master_enabled', "
                        "'rpl_semi_sync_source_timeout', 'rpl_semi_sync_master_timeout', "
                        "'rpl_semi_sync_source_wait_point', 'rpl_semi_sync_master_wait_point')")  # fmt: skip
            found = {str(k).lower().replace("_master_", "_source_"): str(v) for k, v in cur.fetchall()}
        if found.get("gtid_mode", "").upper() == "ON":
            return "gtid"
        semi_sync = found.get("rpl_semi_sync_source_enabled", "").upper() in ("ON", "1")
        if semi_sync and found.get("rpl_semi_sync_source_wait_point", "").upper() == "AFTER_SYNC":
            self._lag_s += int(found.get("rpl_semi_sync_source_timeout") or 10000) / 1000
        return "lag"

    def _before_invisible(self, conn: _Connection, head: BinlogOffset) -> BinlogOffset:
        """The boundary before the first transaction up to ``head`` the engine has not committed."""
        with conn.cursor() as cur:
            cur.execute("SELECT @@GLOBAL.gtid_executed")
            row = cur.fetchone()
        executed = gtid_matcher(str(row[0] or "").replace("\n", "") if row else "")
        start = self._visible if self._visible is not None and self._visible <= head else None
        previous = start or BinlogOffset(head.file, 4)
        for offset, gtid in self._boundaries(previous, head):
            if gtid is not None and not executed(gtid):
                self._visible = previous
                return previous
            previous = offset
        self._visible = head
        return head

    def _lagged(self, head: BinlogOffset) -> BinlogOffset:
        now = self._clock()
        self._readings.append((now, head))
        old = [r for r in self._readings if r[0] <= now - self._lag_s]
        if not old:
            self._sleep(self._readings[0][0] + self._lag_s - now)
            old = self._readings[:1]
        self._readings = [r for r in self._readings if r[0] > now - self._lag_s] or self._readings[-1:]
        return old[-1][1]


def _snapshot_offset(conn: _Connection) -> BinlogOffset:
    """MariaDB's (and Percona's) offset of the last transaction the engine committed."""
    with conn.cursor() as cur:
        return _snapshot_status(cur, "GLOBAL")


def _snapshot_status(cur: _Cursor, scope: str) -> BinlogOffset:
    """``binlog_snapshot_file`` / ``_position``: of the engine (GLOBAL), or of this session's
    consistent snapshot (SESSION)."""
    cur.execute(
        f"SHOW {scope} STATUS WHERE Variable_name IN ('binlog_snapshot_file', 'binlog_snapshot_position')"
    )
    status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
    return BinlogOffset(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))


@contextlib.contextmanager
def consistent_snapshot(conn: _Connection) -> Iterator[BinlogOffset]:
    """A transaction with one read view, and the exact binlog offset that view sees (MariaDB and
    Percona report it as ``binlog_snapshot_file`` / ``_position``; no lock). Committed on exit."""
    with conn.cursor() as cur:
        # Only REPEATABLE READ keeps one read view for the transaction: under a server default
        # of READ COMMITTED a SELECT would see rows committed after the snapshot's position.
        cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cur.execute("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        try:
            cur.execute(
                "SHOW STATUS WHERE Variable_name IN ('binlog_snapshot_file', 'binlog_snapshot_position')"
            )
            status = {str(k).lower(): str(v) for k, v in cur.fetchall()}
            yield BinlogOffset(status["binlog_snapshot_file"], int(status["binlog_snapshot_position"]))
        finally:
            cur.execute("COMMIT")
