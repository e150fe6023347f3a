"""The two bulk SELECT readers (connectorx, pymysql) return the same typed Arrow, type by type."""

from __future__ import annotations

import contextlib

import pyarrow as pa
import pytest

from binlake.events import TableId
from binlake.source.chunks.bulk_select import ConnectorxSelect, PymysqlSelect
from binlake.source.chunks.splitter import Chunk, ChunkRange, ChunkSplitter
from binlake.source.server.connection import connect
from binlake.source.server.discovery import discover
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import source_config

EXTREMES = """CREATE TABLE extremes (
  id BIGINT UNSIGNED PRIMARY KEY, t TIME(6), d DATE, dt DATETIME(6), ts TIMESTAMP(6) NULL,
  wide DECIMAL(65,30), small DECIMAL(5,5), b1 BIT(1), b64 BIT(64), flag TINYINT(1), y YEAR,
  g GEOMETRY NULL, j JSON, l1 VARCHAR(20) CHARACTER SET latin1, fixed BINARY(8), c CHAR(10),
  e ENUM('a','b') NULL, s SET('x','y','z'), f FLOAT, db DOUBLE, ti TINYINT, mi MEDIUMINT UNSIGNED)"""

ROWS = [
    "(18446744073709551615, '-838:59:59.999999', '0000-00-00', '0000-00-00 00:00:00', NULL,"
    " '-99999999999999999999999999999999999.999999999999999999999999999999', -0.99999, b'1',"
    " b'1111111111111111111111111111111111111111111111111111111111111111', 1, 0,"
    " ST_GeomFromText('LINESTRING(0 0, 1 1)'), '{\"k\": [1, \"ü\"]}', 'café', 'ab', 'x  ', NULL, '', -3.4e38,"
    " 1.7976931348623157e308, -128, 16777215)",
    "(0, '838:59:59', '9999-12-31', '1000-01-01 00:00:00.000001', '2038-01-19 03:14:07.999999',"
    " 0, 0, b'0', b'0', -5, 2155, NULL, NULL, '', X'00', '', 'b', 'x,z', 1.17549e-38, -0.0, 127, 0)",
    "(7, '-00:00:00.000001', '2024-02-00', '2024-02-29 23:59:59.5', '1970-01-01 00:00:01',"
    " 1, 0.5, NULL, NULL, NULL, NULL, NULL, '[]', NULL, NULL, NULL, NULL, 'y', NULL, NULL, NULL, NULL)",
]


def both(
    server: PrivateMariaDB, database: str, table: str, chunk_size: int = 100
) -> list[tuple[pa.Table, pa.Table]]:
    source = source_config(server, database)
    with contextlib.closing(connect(source)) as conn:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        (schema,) = discover(conn, [TableId(database, table)])
        key = schema.primary_key[0] if schema.primary_key else "customer_id"
        chunks = [
            *ChunkSplitter(conn, chunk_size).split(schema, key).chunks,
            Chunk(schema.table, 99, key, ChunkRange.all()),
        ]
        fast, slow = ConnectorxSelect(source, schema, conn), PymysqlSelect(source, schema, conn)
        return [(fast.select(c), slow.select(c)) for c in chunks]


def test_demo_tables(mariadb: PrivateMariaDB, database: str) -> None:
    demo.load(mariadb.admin_connection, 2000, database=database)
    for table in demo.COLUMNS:
        for fast, slow in both(mariadb, database, table):
            assert fast.schema == slow.schema, table
            assert fast.equals(slow), table


def test_extreme_values(mariadb: PrivateMariaDB, database: str) -> None:
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates are only accepted outside strict mode
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(EXTREMES)
        for row in ROWS:
            cur.execute(f"INSERT INTO extremes VALUES {row}")
    [(fast, slow), *_] = both(mariadb, database, "extremes")
    assert fast.equals(slow), (fast.to_pylist(), slow.to_pylist())
    rows = {r["id"]: r for r in fast.to_pylist()}
    assert rows[18446744073709551615]["t"] == -((838 * 60 + 59) * 60 + 59) * 1_000_000 - 999_999
    assert rows[18446744073709551615]["d"] is None  # zero date
    assert rows[7]["d"] is None  # partly zero date
    assert str(rows[18446744073709551615]["wide"]).startswith("-99999999999999999999999999999999999.9999")
    assert rows[18446744073709551615]["b64"] == b"\xff" * 8
    assert rows[18446744073709551615]["fixed"] == b"ab" + b"\0" * 6
    assert rows[0]["ts"].isoformat() == "2038-01-19T03:14:07.999999+00:00"
    assert rows[18446744073709551615]["g"][:1] in (b"\x00", b"\x01")  # WKB starts with its byte order


def test_dates_are_read_through_the_check_from_the_first_zero_date_on(
    mariadb: PrivateMariaDB, database: str
) -> None:
    """Dates are selected as they are (no check on the server) until a chunk holds a zero date,
    which connectorx refuses; that chunk and every later one are read through the check."""
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("CREATE TABLE d (id INT PRIMARY KEY, d DATE, dt DATETIME(3), ts TIMESTAMP NULL)")
        cur.execute(
            "INSERT INTO d VALUES (1, '2024-01-31', '2024-01-31 10:00:00.125', '2024-01-31 10:00:00'),"
            " (2, NULL, NULL, NULL), (11, '2024-02-00', '2024-02-01 00:00:00', '0000-00-00 00:00:00'),"
            " (12, '2024-03-01', '0000-00-00 00:00:00', '2024-03-01 00:00:00'), (21, '1000-01-01',"
            " '9999-12-31 23:59:59.999', '1970-01-01 00:00:01')"
        )
    source = source_config(mariadb, database)
    with contextlib.closing(connect(source)) as conn:
        with conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
        (schema,) = discover(conn, [TableId(database, "d")])
        fast, slow = ConnectorxSelect(source, schema, conn), PymysqlSelect(source, schema, conn)
        checked = []
        for i, bounds in enumerate([(None, 10), (10, 20), (20, None)]):
            chunk = Chunk(schema.table, i, "id", ChunkRange(*bounds))
            got, want = fast.select(chunk), slow.select(chunk)
            assert got.equals(want), (got.to_pylist(), want.to_pylist())
            checked.append(fast._dates_checked)
    assert checked == [False, True, True]
    assert fast.zero_dates == slow.zero_dates == 2  # rows 11 and 12


def test_connectorx_error_is_clear_and_hides_the_password(mariadb: PrivateMariaDB, database: str) -> None:
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=database)
    source = source_config(mariadb, database)
    with contextlib.closing(connect(source)) as conn:
        (schema,) = discover(conn, [TableId(database, "t")])
        select = ConnectorxSelect(source, schema, conn)
    mariadb.execute("DROP TABLE t", database=database)
    with pytest.raises(Exception, match=r"Could not select chunk t#0 .* through connectorx") as info:
        select.select(Chunk(schema.table, 0, "id", ChunkRange.all()))
    assert mariadb.password not in str(info.value)
