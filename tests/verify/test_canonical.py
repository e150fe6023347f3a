"""The checksum's canonical rendering: the server's SQL and binlake's Arrow rendering agree on every
type of the type mapping (extreme values, zero dates, NULLs), through both of binlake's read paths
(the snapshot's SELECT and the binlog), and a changed value changes the checksum."""

from __future__ import annotations

import contextlib
import hashlib
import random
import struct
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from binlake.config import PipelineConfig
from binlake.events import Column, TableId
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from binlake.verify.canonical import (
    MASK,
    Hashing,
    checksum_sql,
    crc_pairs,
    double_text,
    md5_prefixes,
    row_hashes,
    row_sql,
    row_texts,
    server_hashing,
    value_renderer,
    value_sql,
)
from tests.helpers import pipeline_dict
from tests.schema.test_type_round_trip import create_types, read_both_ways


@pytest.fixture
def config(mariadb: PrivateMariaDB, database: str, tmp_path: Path) -> PipelineConfig:
    return PipelineConfig.model_validate(pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work"))


def _server(mariadb: PrivateMariaDB, database: str, query: str) -> list[tuple[object, ...]]:
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(query)
        return list(cur.fetchall())


def test_every_type_renders_alike_on_the_server_and_in_binlake(
    mariadb: PrivateMariaDB, database: str, config: PipelineConfig
) -> None:
    schema = create_types(mariadb, database, config)
    result = read_both_ways(mariadb, database, config, schema, 6300)
    rows = result.data.sort_by("id")

    expected = _server(mariadb, database, f"SELECT {row_sql(schema.columns)} FROM types ORDER BY id")
    texts = row_texts(rows, schema.columns).to_pylist()
    assert len(texts) == 4
    for got, (want,) in zip(texts, expected, strict=True):
        assert got == (want.encode() if isinstance(want, str) else want)

    for hashing in ("md5", "crc"):  # the server computes each as binlake does
        query = f"SELECT {checksum_sql(schema.columns, hashing=hashing)} FROM types"
        ((count, total),) = _server(mariadb, database, query)
        assert count == 4
        assert int(total) & MASK == int(row_hashes(rows, schema.columns, hashing).sum(dtype="uint64"))

    # One changed value in any column changes the row's hash, either way.
    for hashing in ("md5", "crc"):
        _each_change_changes_the_hash(rows, schema.columns, hashing)


def test_edge_dates_enums_and_charsets_render_alike(
    mariadb: PrivateMariaDB, database: str, config: PipelineConfig
) -> None:
    """What the rendering's shortcuts meet: dates partly zero and before 1970; a zero TIMESTAMP;
    an ENUM of plain members (one piece without a length) beside one whose members hold the
    separator or ``N``, and a latin1 SET of such members; text of two utf8mb4 collations, utf8mb3
    and latin1 beside bytes that are not UTF-8 (a row of several collations must not convert the
    binary values)."""
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute(
            "CREATE TABLE edges (id INT PRIMARY KEY, d DATE, dt DATETIME(6), dt0 DATETIME,"
            " ts TIMESTAMP(3) NULL, ts0 TIMESTAMP NULL, e ENUM('new','paid','') CHARACTER SET latin1,"
            " en ENUM('N','a,b'), a VARCHAR(20) COLLATE utf8mb4_unicode_ci,"
            " b VARCHAR(20) COLLATE utf8mb4_general_ci, m VARCHAR(20) CHARACTER SET utf8mb3,"
            " l VARCHAR(20) CHARACTER SET latin1, bb VARBINARY(8), s SET('N','x') CHARACTER SET latin1)"
            " DEFAULT CHARSET=utf8mb4"
        )
        cur.execute(
            "INSERT INTO edges VALUES"
            " (0, '1000-01-01', '1969-12-31 23:59:59.999999', '1970-01-01 00:00:00', '1970-01-01 00:00:01',"
            "  '2038-01-19 03:14:07', 'new', 'N', 'é,1:x', 'ü', 'ß', 'ç', X'FF00', 'N,x'),"
            " (1, '1969-12-31', '1969-12-31 23:59:59.5', '0001-01-02', '2001-02-03 04:05:06.789',"
            "  '0000-00-00 00:00:00', '', 'a,b', 'N', '', 'N', 'N', X'2C4E', 'N'),"
            " (2, '2024-00-15', '2024-01-00 10:00:00.5', '0000-00-00', NULL, NULL, NULL, NULL, NULL,"
            "  NULL, NULL, NULL, NULL, NULL),"
            " (3, '9999-12-31', '1000-01-01 00:00:00', '9999-12-31 23:59:59', '2038-01-19 03:14:07.999',"
            "  '1970-01-01 00:00:01', 'paid', 'a,b', '', 'x', '', 'é', '', '')"
        )
    with contextlib.closing(mariadb.admin_connection(database)) as conn:
        (schema,) = discover(conn, [TableId(database, "edges")])
    assert row_sql([schema.column("e")]) == "CONCAT_WS(',', IFNULL(CAST(`e` AS BINARY), 'N'))"  # no length
    result = read_both_ways(mariadb, database, config, schema, 6310, first_late=2)
    rows = result.data.sort_by("id")

    expected = _server(mariadb, database, f"SELECT {row_sql(schema.columns)} FROM edges ORDER BY id")
    texts = row_texts(rows, schema.columns).to_pylist()
    assert texts == [want.encode() if isinstance(want, str) else want for (want,) in expected]
    assert texts[2] == b"2,N,N,N,N,N,N,N,N,N,N,N,N,N"  # partly zero dates and a zero datetime: NULL
    for hashing in ("md5", "crc"):
        query = f"SELECT {checksum_sql(schema.columns, hashing=hashing)} FROM edges"
        ((count, total),) = _server(mariadb, database, query)
        assert count == 4
        assert int(total) & MASK == int(row_hashes(rows, schema.columns, hashing).sum(dtype="uint64"))
        _each_change_changes_the_hash(rows, schema.columns, hashing)


def test_dates_of_year_zero_count_days_as_arrow_does(mariadb: PrivateMariaDB, database: str) -> None:
    """The server's calendar has no 29 February in year 0, the sink's (Arrow's, proleptic Gregorian)
    has: the rendering counts days since 1970 as the sink does on either side of it."""
    values = [
        "0000-01-01",
        "0000-02-28",
        "0000-03-01",
        "0001-01-01",
        "1582-10-04",
        "1969-12-31",
        "2024-02-29",
    ]
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE days (i INT PRIMARY KEY, d DATE, dt DATETIME(6))")
        cur.executemany(
            "INSERT INTO days VALUES (%s, %s, %s)", [(i, v, f"{v} 01:02:03.5") for i, v in enumerate(values)]
        )
        (schema,) = discover(conn, [TableId(database, "days")])
    d, dt = schema.column("d"), schema.column("dt")
    printed = _server(mariadb, database, f"SELECT {value_sql(d)}, {value_sql(dt)} FROM days ORDER BY i")
    dates = pa.array(values).cast(pa.date32())
    stamps = pa.array([f"{v} 01:02:03.5" for v in values]).cast(pa.timestamp("us"))
    assert value_renderer(d)(dates).to_pylist() == [str(row[0]) for row in printed]
    assert value_renderer(dt)(stamps).to_pylist() == [str(row[1]) for row in printed]


def _each_change_changes_the_hash(rows: pa.Table, columns: list[Column], hashing: Hashing) -> None:
    hashes = row_hashes(rows, columns, hashing)
    for column in columns[1:]:
        values = rows.column(column.name).to_pylist()
        changed = [_other(v) for v in values]
        altered = rows.set_column(
            rows.schema.get_field_index(column.name),
            column.name,
            pa.array(changed, rows.schema.field(column.name).type),
        )
        different = row_hashes(altered, columns, hashing) != hashes
        assert different[[i for i, v in enumerate(values) if v != changed[i]]].all(), (hashing, column.name)


def _other(value: object) -> object:
    if value is None:
        return None
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value - 1 if value > 0 else value + 1
    if isinstance(value, Decimal):
        return value - Decimal(1) if value > 0 else value + Decimal(1)
    if isinstance(value, float):
        return value / 2 if value else 1.0
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, bytes):
        return value[:-1] + bytes([(value[-1] + 1) % 256]) if value else b"\x01"
    import datetime as dt

    if isinstance(value, dt.datetime | dt.date):
        return value - dt.timedelta(days=1)
    raise AssertionError(type(value))


def test_doubles_print_as_the_server_prints_them(mariadb: PrivateMariaDB, database: str) -> None:
    rng = random.Random(7)
    values = [
        0.0,
        -0.0,
        1.0,
        0.1,
        1e14,
        1e15,
        1e-15,
        1e-16,
        123456789012345.0,
        5e-324,
        1.7976931348623157e308,
    ]
    values += [rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(500)]
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE doubles (i INT PRIMARY KEY, d DOUBLE, f FLOAT)")
        cur.executemany(
            "INSERT INTO doubles VALUES (%s, %s, %s)",
            [(i, v, v if abs(v) < 1e38 else None) for i, v in enumerate(values)],
        )
    with contextlib.closing(mariadb.admin_connection(database)) as conn:
        (schema,) = discover(conn, [TableId(database, "doubles")])
    d, f = schema.column("d"), schema.column("f")
    printed = _server(mariadb, database, f"SELECT i, {value_sql(d)}, {value_sql(f)} FROM doubles ORDER BY i")
    assert [double_text(v) for v in values] == [row[1] for row in printed]
    # A FLOAT column holds the value rounded to 32 bits; binlake maps it to float32 exactly.
    widened = [
        None if abs(v) >= 1e38 else double_text(float(struct.unpack("<f", struct.pack("<f", v))[0]))
        for v in values
    ]
    assert widened == [row[2] for row in printed]


def test_md5_prefixes_are_the_digests_first_eight_bytes_big_endian() -> None:
    rng = random.Random(3)
    texts = [b"", b"abc", bytes(range(256)) * 9] + [rng.randbytes(rng.randrange(200)) for _ in range(2000)]
    expected = [int.from_bytes(hashlib.md5(t).digest()[:8], "big") for t in texts]
    assert md5_prefixes(pa.array(texts, pa.binary())).tolist() == expected


def test_crc_pairs_are_crc32_then_crc32c() -> None:
    """The standard check values of both codes (the bytes ``123456789``), and the empty text."""
    assert crc_pairs(pa.array([b"123456789", b""], pa.binary())).tolist() == [0xCBF43926_E3069283, 0]


def test_mariadb_hashes_rows_with_the_crcs_and_keeps_each_rows_own_text(
    mariadb: PrivateMariaDB, database: str
) -> None:
    """MariaDB 10.8+ has CRC32C: verify's rows are hashed with both CRCs there; the server reads
    each row's text, not the one before (``server_hashing``'s check), over many rows too."""
    with contextlib.closing(mariadb.admin_connection(database)) as conn:
        assert server_hashing(conn) == "crc"
    texts = [f"{i}:{'x' * (i % 17)}" for i in range(500)]
    rows = " UNION ALL ".join(f"SELECT '{t}' AS t" for t in texts)
    sql = f"SELECT SUM((CRC32(@binlake_row := t) << 32) | CRC32C(@binlake_row)) FROM ({rows}) AS d"
    ((total,),) = _server(mariadb, database, sql)
    expected = crc_pairs(pa.array([t.encode() for t in texts], pa.binary())).sum(dtype="uint64")
    assert int(total) & MASK == int(expected)
