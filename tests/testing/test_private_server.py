"""The private MariaDB the tests, the demo and the benchmarks run against."""

from __future__ import annotations

import contextlib
import socket
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pymysql
import pytest

from binlake.testing.private_server import PrivateMariaDB, free_port


def test_session_server_has_cdc_binlog_settings(mariadb: PrivateMariaDB) -> None:
    rows = mariadb.query(
        "SELECT @@log_bin, @@binlog_format, @@binlog_row_image, @@binlog_row_metadata, @@server_id, "
        "@@bind_address, @@port"
    )
    assert rows == [(1, "ROW", "FULL", "FULL", 1, "127.0.0.1", mariadb.port)]


def test_cdc_user_has_exactly_the_least_privilege_grant(mariadb: PrivateMariaDB) -> None:
    with contextlib.closing(mariadb.cdc_connection()) as conn, conn.cursor() as cur:
        cur.execute("SHOW GRANTS")
        grants = [row[0] for row in cur.fetchall()]
    assert len(grants) == 1
    # MariaDB shows REPLICATION CLIENT as BINLOG MONITOR.
    assert grants[0].startswith(
        "GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, BINLOG MONITOR ON *.* TO `binlake`@"
    )
    with (
        contextlib.closing(mariadb.cdc_connection()) as conn,
        conn.cursor() as cur,
        pytest.raises(pymysql.err.OperationalError, match="denied"),
    ):
        cur.execute("CREATE DATABASE not_allowed")


def test_each_test_gets_its_own_database(mariadb: PrivateMariaDB, database: str) -> None:
    assert database.startswith("t_test_each_test_gets_its_own_database_")
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t VALUES (1)", database=database)
    assert mariadb.query("SELECT COUNT(*) FROM t", database=database) == [(1,)]


def test_small_max_binlog_size_rotates_files() -> None:
    with PrivateMariaDB(max_binlog_size=4096) as server:
        before = len(server.query("SHOW BINARY LOGS"))
        server.execute("CREATE DATABASE r", "CREATE TABLE r.t (id INT PRIMARY KEY, pad VARCHAR(500))")
        for i in range(40):
            server.execute(f"INSERT INTO r.t VALUES ({i}, REPEAT('x', 500))")
        assert len(server.query("SHOW BINARY LOGS")) > before + 3


def test_restart_keeps_data_port_and_user() -> None:
    server = PrivateMariaDB()
    try:
        server.start()
        server.execute(
            "CREATE DATABASE keep",
            "CREATE TABLE keep.t (id INT PRIMARY KEY)",
            "INSERT INTO keep.t VALUES (7)",
        )
        port = server.port
        server.stop()
        assert not server.running
        server.start()
        assert server.port == port
        with contextlib.closing(server.cdc_connection()) as conn, conn.cursor() as cur:
            cur.execute("SELECT id FROM keep.t")
            assert cur.fetchall() == ((7,),)
    finally:
        server.remove()
    assert server.base_dir is not None
    assert not server.base_dir.exists()


def test_options_override_and_remove_defaults() -> None:
    with PrivateMariaDB(options={"log-bin": None, "binlog-format": "STATEMENT"}) as server:
        assert server.query("SELECT @@log_bin, @@binlog_format") == [(0, "STATEMENT")]


def test_free_port_is_bindable() -> None:
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_relative_and_deep_base_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # `make demo` passes a relative folder; deep folders would overflow the unix socket path.
    deep = tmp_path / ("very-long-folder-name-" * 4) / "nested"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    with PrivateMariaDB(base_dir=Path("rel/server")) as server:
        assert server.datadir == deep / "rel" / "server" / "data"
        assert len(str(server.socket_path)) < 108
        assert server.query("SELECT 1") == [(1,)]


def test_servers_initialised_at_once_all_start() -> None:
    # Parallel test processes each initialise a server at the same moment; in a shared /tmp their
    # bootstraps took each other's temporary tables and failed.
    servers = [PrivateMariaDB() for _ in range(3)]
    try:
        with ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda server: server.start(), servers))
        assert [s.query("SELECT 1") for s in servers] == [[(1,)]] * len(servers)
        assert len({s.tmpdir for s in servers}) == len(servers)
    finally:
        for server in servers:
            server.remove()
