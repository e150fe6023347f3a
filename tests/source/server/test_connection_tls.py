"""Connections offer TLS as pymysql does (used when the server has it), with one context per process."""

from __future__ import annotations

import contextlib
import subprocess
from pathlib import Path
from typing import Any

import pytest

from binlake.source.binlog.scan import transactions
from binlake.source.server.connection import SourceConnection, connect
from binlake.testing.private_server import PrivateMariaDB
from tests.conftest import ServerFactory
from tests.helpers import binlog_range, source_config


@pytest.fixture(scope="module")
def tls_server(mariadb_factory: ServerFactory, tmp_path_factory: pytest.TempPathFactory) -> PrivateMariaDB:
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "server.pem", folder / "server.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return mariadb_factory(**{"ssl-cert": str(cert), "ssl-key": str(key)})


def _cipher(conn: Any) -> str:
    with conn.cursor() as cur:
        cur.execute("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        return str(cur.fetchone()[1])


def test_tls_is_used_where_the_server_offers_it_with_one_shared_context(
    tls_server: PrivateMariaDB, mariadb: PrivateMariaDB
) -> None:
    source = source_config(tls_server, "mysql")
    with contextlib.closing(connect(source)) as first, contextlib.closing(connect(source)) as second:
        assert _cipher(first)  # TLS negotiated
        assert _cipher(second)
        assert first.ctx is second.ctx is SourceConnection._preferred
    with contextlib.closing(connect(source_config(mariadb, "mysql"))) as plain:
        assert _cipher(plain) == ""  # no TLS on the server: plain, as pymysql's own default does


def test_binlog_dump_over_tls(tls_server: PrivateMariaDB, tmp_path: Path) -> None:
    tls_server.execute("CREATE DATABASE IF NOT EXISTS tls_dump")
    start, end = binlog_range(
        tls_server, "tls_dump", ["CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY)"],
        ["INSERT INTO t VALUES (1)", "INSERT INTO t VALUES (2)"],
    )  # fmt: skip
    found = list(transactions(source_config(tls_server, "tls_dump"), 5101, start, end))
    assert [b.offset for b in found][-1] == end
    assert len(found) == 2
