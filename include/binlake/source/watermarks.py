"""Binlog watermarks: the source's current binlog offset, read without any lock.

MySQL 8.2 renamed ``SHOW MASTER STATUS`` to ``SHOW BINARY LOG STATUS`` and 8.4 removed the old
name; MariaDB (10.11 included) knows only the old one. MariaDB's GTID position comes from
``@@gtid_binlog_pos``; MySQL's GTID set is a column of the status row.
"""

from __future__ import annotations

from typing import Any, Protocol

from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset
from binlake.source.connection import ServerVersion

#: First MySQL version that has SHOW BINARY LOG STATUS (8.4 no longer has SHOW MASTER STATUS).
BINARY_LOG_STATUS_SINCE = (8, 2, 0)


class BinlogDisabledError(BinlakeError):
    """The server writes no binlog, so there is no offset to read."""


class _Cursor(Protocol):
    description: Any

    def execute(self, query: str, args: Any = ...) -> Any: ...
    def fetchone(self) -> Any: ...


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
