"""Current binlog offset: SHOW MASTER STATUS / SHOW BINARY LOG STATUS by version, GTIDs."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from binlake.offsets import BinlogOffset
from binlake.source.connection import ServerVersion, connect
from binlake.source.watermarks import BinlogDisabledError, current_offset, status_statement
from binlake.testing.private_server import PrivateMariaDB
from tests.conftest import ServerFactory
from tests.helpers import source_config


class FakeCursor:
    """Answers the status statement of one MySQL version, and fails on any other."""

    def __init__(self, expected: str, columns: list[str], row: tuple[Any, ...]) -> None:
        self.expected, self.columns, self.row = expected, columns, row
        self.executed: list[str] = []
        self.description: list[tuple[str]] = []

    def execute(self, query: str, args: Any = None) -> None:
        self.executed.append(query)
        if query != self.expected:
            raise AssertionError(f"unexpected statement {query!r}")
        self.description = [(c,) for c in self.columns]

    def fetchone(self) -> tuple[Any, ...]:
        return self.row

    def __enter__(self) -> FakeCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class FakeConnection:
    def __init__(self, cursor: FakeCursor) -> None:
        self._cursor = cursor

    def cursor(self) -> FakeCursor:
        return self._cursor


MYSQL_COLUMNS = ["File", "Position", "Binlog_Do_DB", "Binlog_Ignore_DB", "Executed_Gtid_Set"]


def test_mysql_84_uses_show_binary_log_status() -> None:
    version = ServerVersion.parse("8.4.3")
    gtid = "3E11FA47-71CA-11E1-9E33-C80AA9429562:1-5,\n4E11FA47-71CA-11E1-9E33-C80AA9429562:1-9"
    cursor = FakeCursor("SHOW BINARY LOG STATUS", MYSQL_COLUMNS, ("binlog.000017", 3456, "", "", gtid))
    offset = current_offset(FakeConnection(cursor), version)
    assert offset == BinlogOffset("binlog.000017", 3456)
    assert offset.gtid == gtid.replace("\n", "")
    assert cursor.executed == ["SHOW BINARY LOG STATUS"]


def test_mysql_80_uses_show_master_status() -> None:
    version = ServerVersion.parse("8.0.36-log")
    cursor = FakeCursor("SHOW MASTER STATUS", MYSQL_COLUMNS, ("mysql-bin.000003", 154, "", "", ""))
    offset = current_offset(FakeConnection(cursor), version)
    assert offset == BinlogOffset("mysql-bin.000003", 154)
    assert offset.gtid is None


def test_status_statement_by_version() -> None:
    assert status_statement(ServerVersion.parse("8.4.0")) == "SHOW BINARY LOG STATUS"
    assert status_statement(ServerVersion.parse("5.7.44")) == "SHOW MASTER STATUS"
    assert status_statement(ServerVersion.parse("11.4.2-MariaDB")) == "SHOW MASTER STATUS"


def test_mariadb_offset_moves_and_carries_gtid(mariadb: PrivateMariaDB, database: str) -> None:
    source = source_config(mariadb, database)
    with contextlib.closing(connect(source)) as conn:
        version = ServerVersion.parse(mariadb.query("SELECT VERSION()")[0][0])
        before = current_offset(conn, version)
        mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)", database=database)
        after = current_offset(conn, version)
    assert after > before
    assert after.gtid is not None
    assert after.gtid.startswith("0-1-")


def test_binlog_off_is_a_clear_error(mariadb_factory: ServerFactory) -> None:
    server = mariadb_factory(**{"log-bin": None})
    with contextlib.closing(connect(source_config(server, "mysql"))) as conn:
        with pytest.raises(BinlogDisabledError, match="binary log is off"):
            current_offset(conn, ServerVersion.parse("10.11.19-MariaDB"))
