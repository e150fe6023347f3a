"""Current binlog offset: SHOW MASTER STATUS / SHOW BINARY LOG STATUS by version, GTIDs."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest

from binlake.offsets import BinlogOffset
from binlake.source.chunks.watermarks import (
    BinlogDisabledError,
    LowWatermark,
    current_offset,
    status_statement,
)
from binlake.source.server.connection import ServerVersion, connect, server_version
from binlake.testing.private_server import PrivateMariaDB
from tests.conftest import ServerFactory
from tests.helpers import hold_commit, source_config


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


# -- the low watermark: what the next SELECT can see ------------------------------------------------


class ScriptedCursor:
    """Answers statements by their first words; each answer is (column names, rows)."""

    def __init__(self, answers: dict[str, tuple[list[str], list[tuple[Any, ...]]]]) -> None:
        self.answers = answers
        self.description: list[tuple[str]] = []
        self._rows: list[tuple[Any, ...]] = []

    def execute(self, query: str, args: Any = None) -> None:
        for start, (columns, rows) in self.answers.items():
            if query.startswith(start):
                self.description, self._rows = [(c,) for c in columns], list(rows)
                return
        raise AssertionError(f"unexpected statement {query!r}")

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None

    def fetchall(self) -> list[tuple[Any, ...]]:
        return self._rows

    def __enter__(self) -> ScriptedCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


MYSQL_84 = ServerVersion.parse("8.4.3")
UUID = "3e11fa47-71ca-11e1-9e33-c80aa9429562"


def _mysql(variables: dict[str, str], position: int, executed: str) -> FakeConnection:
    return FakeConnection(
        ScriptedCursor(  # type: ignore[arg-type]
            {
                "SHOW GLOBAL STATUS LIKE 'binlog_snapshot_position'": (["Variable_name", "Value"], []),
                "SHOW GLOBAL VARIABLES": (["Variable_name", "Value"], list(variables.items())),
                "SHOW BINARY LOG STATUS": (MYSQL_COLUMNS, [("binlog.000004", position, "", "", executed)]),
                "SELECT @@GLOBAL.gtid_executed": (["gtid"], [(executed,)]),
            }
        )
    )


def test_mysql_with_gtids_starts_before_the_first_transaction_not_yet_executed() -> None:
    # Transactions 1-3 end at 200, 300, 400; the engine has executed 1-2 (3 waits for a replica).
    boundaries = [
        (BinlogOffset("binlog.000004", p), f"{UUID}:{n}") for n, p in ((1, 200), (2, 300), (3, 400))
    ]
    scanned: list[tuple[BinlogOffset, BinlogOffset]] = []

    def scan(start: BinlogOffset, end: BinlogOffset) -> list[tuple[BinlogOffset, str | None]]:
        scanned.append((start, end))
        return [b for b in boundaries if start < b[0] <= end]

    low = LowWatermark(scan)
    conn = _mysql({"gtid_mode": "ON"}, 400, f"{UUID}:1-2")
    assert low.read(conn, MYSQL_84) == BinlogOffset("binlog.000004", 300)
    assert scanned == [(BinlogOffset("binlog.000004", 4), BinlogOffset("binlog.000004", 400))]
    # Once 3 is executed: the head; the next scan starts where the last visible offset was.
    assert low.read(_mysql({"gtid_mode": "ON"}, 400, f"{UUID}:1-3"), MYSQL_84) == BinlogOffset(
        "binlog.000004", 400
    )
    assert scanned[-1][0] == BinlogOffset("binlog.000004", 300)


def test_mysql_without_gtids_uses_an_offset_read_long_enough_before() -> None:
    now = [100.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    semi_sync = {
        "gtid_mode": "OFF",
        "rpl_semi_sync_source_enabled": "ON",
        "rpl_semi_sync_source_wait_point": "AFTER_SYNC",
        "rpl_semi_sync_source_timeout": "2000",
    }
    low = LowWatermark(lambda start, end: [], clock=lambda: now[0], sleep=sleep)
    # The first read waits out the semi-sync timeout plus a second, then uses its own offset.
    assert low.read(_mysql(semi_sync, 500, ""), MYSQL_84) == BinlogOffset("binlog.000004", 500)
    assert slept == [3.0]
    now[0] += 1.0
    # A read 1 s later uses the offset read 3 s (or more) before it, without waiting.
    assert low.read(_mysql(semi_sync, 900, ""), MYSQL_84) == BinlogOffset("binlog.000004", 500)
    now[0] += 3.0
    assert low.read(_mysql(semi_sync, 1200, ""), MYSQL_84) == BinlogOffset("binlog.000004", 900)
    assert slept == [3.0]


def test_mariadb_low_watermark_excludes_a_commit_semi_sync_holds(mariadb_factory: ServerFactory) -> None:
    server = mariadb_factory(**{"rpl-semi-sync-master-wait-point": "AFTER_SYNC"})
    server.execute(
        "CREATE DATABASE IF NOT EXISTS semi", "CREATE TABLE IF NOT EXISTS semi.t (id INT PRIMARY KEY)"
    )
    source = source_config(server, "semi")
    with hold_commit(server, "INSERT INTO semi.t VALUES (1)"):
        with contextlib.closing(connect(source)) as conn:
            version = server_version(conn)
            head = current_offset(conn, version)
            low = LowWatermark(lambda start, end: []).read(conn, version)
            with conn.cursor() as cur:
                cur.execute("SELECT COUNT(*) FROM semi.t")
                visible = cur.fetchone()[0]
        assert visible == 0  # the SELECT cannot see the held commit …
        assert low < head  # … and the low watermark stays before it (SHOW MASTER STATUS does not)
    assert server.query("SELECT COUNT(*) FROM semi.t")[0][0] == 1
