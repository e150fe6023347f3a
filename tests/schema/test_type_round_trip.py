"""Every MySQL type, extreme values included: written in MySQL, read back from Iceberg.

The expected value of each cell comes from the server itself, rendered as text by SQL (``HEX``,
``TIME_TO_SEC``, ``DATE_FORMAT`` …), not from binlake's own conversions; the Iceberg value is
rendered the same way in Python and the two must match.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    StringType,
    TimestampType,
    TimestamptzType,
)

from binlake.config import PipelineConfig
from binlake.events import CreateTable, TableId
from binlake.sink.catalog import open_catalog, sink_identifier
from binlake.sink.exactly_once import ChunkCommit
from binlake.sink.metadata_applier import IcebergMetadataApplier
from binlake.sink.writer import IcebergWriter
from binlake.source.chunks.reader import ChunkReader, ChunkResult, SnapshotHooks
from binlake.source.chunks.splitter import Chunk, ChunkRange
from binlake.source.server.connection import connect
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import pipeline_dict

Render = Callable[[Any], str | None]

F = "%Y-%m-%d %H:%i:%s.%f"


def _i(v: Any) -> str | None:
    return None if v is None else str(v)


def _dec(v: Any) -> str | None:
    return None if v is None else (v if isinstance(v, str) else format(v, "f"))


def _bool(v: Any) -> str | None:
    return None if v is None else ("1" if v else "0")


def _hex(v: Any) -> str | None:
    return None if v is None else v.hex().upper()


def _bits(v: Any) -> str | None:
    return None if v is None else str(int.from_bytes(v, "big"))


def _float(v: Any) -> str | None:
    return None if v is None else repr(float(v))


def _date(v: Any) -> str | None:
    return None if v is None else v.isoformat()


def _datetime(v: Any) -> str | None:
    return None if v is None else v.strftime("%Y-%m-%d %H:%M:%S.%f")


def _utc(v: Any) -> str | None:
    assert v is None or v.utcoffset() == dt.timedelta(0)
    return None if v is None else v.strftime("%Y-%m-%d %H:%M:%S.%f")


def _micros(v: Any) -> str | None:
    return None if v is None else str(v)


def _text(v: Any) -> str | None:
    return None if v is None else str(v)


# column, MySQL type, Iceberg type, SQL rendering of the expected value, Python rendering of Iceberg's.
COLUMNS: list[tuple[str, str, type, str, Render]] = [
    ("ti", "TINYINT", IntegerType, "CAST(ti AS CHAR)", _i),
    ("tiu", "TINYINT UNSIGNED", IntegerType, "CAST(tiu AS CHAR)", _i),
    ("si", "SMALLINT", IntegerType, "CAST(si AS CHAR)", _i),
    ("siu", "SMALLINT UNSIGNED", IntegerType, "CAST(siu AS CHAR)", _i),
    ("mi", "MEDIUMINT", IntegerType, "CAST(mi AS CHAR)", _i),
    ("miu", "MEDIUMINT UNSIGNED", IntegerType, "CAST(miu AS CHAR)", _i),
    ("i", "INT", IntegerType, "CAST(i AS CHAR)", _i),
    ("iu", "INT UNSIGNED", LongType, "CAST(iu AS CHAR)", _i),
    ("bi", "BIGINT", LongType, "CAST(bi AS CHAR)", _i),
    ("biu", "BIGINT UNSIGNED", DecimalType, "CAST(biu AS CHAR)", _dec),
    ("flag", "BOOL", BooleanType, "IF(flag IS NULL, NULL, IF(flag <> 0, '1', '0'))", _bool),
    ("d2", "DECIMAL(10,2)", DecimalType, "CAST(d2 AS CHAR)", _dec),
    ("d38", "DECIMAL(38,10)", DecimalType, "CAST(d38 AS CHAR)", _dec),
    ("d65", "DECIMAL(65,30)", StringType, "CAST(d65 AS CHAR)", _dec),
    ("f", "FLOAT", FloatType, "CAST(CAST(f AS DOUBLE) AS CHAR)", _float),
    ("db", "DOUBLE", DoubleType, "CAST(db AS CHAR)", _float),
    ("b1", "BIT(1)", BooleanType, "CAST(b1 + 0 AS CHAR)", _bool),
    ("b5", "BIT(5)", BinaryType, "CAST(b5 + 0 AS CHAR)", _bits),
    ("b64", "BIT(64)", BinaryType, "CAST(b64 + 0 AS CHAR)", _bits),
    ("dd", "DATE", DateType, "IF(MONTH(dd) = 0 OR DAY(dd) = 0, NULL, CAST(dd AS CHAR))", _date),
    ("dt0", "DATETIME", TimestampType, f"DATE_FORMAT(dt0, '{F}')", _datetime),
    ("dt6", "DATETIME(6)", TimestampType, f"IF(MONTH(dt6) = 0, NULL, DATE_FORMAT(dt6, '{F}'))", _datetime),
    ("ts0", "TIMESTAMP NULL", TimestamptzType, f"DATE_FORMAT(ts0, '{F}')", _utc),
    ("ts6", "TIMESTAMP(6) NULL", TimestamptzType, f"DATE_FORMAT(ts6, '{F}')", _utc),
    ("t0", "TIME", LongType, "CAST(TIME_TO_SEC(t0) * 1000000 AS SIGNED)", _micros),
    ("t6", "TIME(6)", LongType, "CAST(TIME_TO_SEC(t6) * 1000000 AS SIGNED)", _micros),
    ("y", "YEAR", IntegerType, "CAST(y + 0 AS CHAR)", _i),
    ("c", "CHAR(10)", StringType, "c", _text),
    ("vl", "VARCHAR(20) CHARACTER SET latin1", StringType, "vl", _text),
    ("tx", "TEXT", StringType, "tx", _text),
    ("bn", "BINARY(8)", BinaryType, "HEX(bn)", _hex),
    ("vb", "VARBINARY(20)", BinaryType, "HEX(vb)", _hex),
    ("bl", "BLOB", BinaryType, "HEX(bl)", _hex),
    ("e", "ENUM('a','b','ç')", StringType, "e", _text),
    ("st", "SET('x','y','z')", StringType, "st", _text),
    ("j", "JSON", StringType, "j", _text),
    ("g", "GEOMETRY NULL", BinaryType, "HEX(ST_AsBinary(g))", _hex),
]

MAX = (
    "127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807, "
    "18446744073709551615, 1, 99999999.99, 9999999999999999999999999999.9999999999, "
    "99999999999999999999999999999999999.999999999999999999999999999999, 3.402823e38, "
    "1.7976931348623157e308, b'1', b'11111', "
    "b'1111111111111111111111111111111111111111111111111111111111111111', '9999-12-31', "
    "'9999-12-31 23:59:59', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07', "
    "'2038-01-19 03:14:07.999999', '838:59:59', '838:59:59.000000', 2155, 'emoji 🎉👩‍💻', "
    "'crème brûlée', REPEAT('long ', 1000), X'FFFFFFFFFFFFFFFF', X'00FF00', X'DEADBEEF', 'ç', "
    "'x,y,z', '{\"k\": [1, {\"ü\": null}]}', ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))')"
)
MIN = (
    "-128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, 0, -99999999.99, "
    "-9999999999999999999999999999.9999999999, "
    "-99999999999999999999999999999999999.999999999999999999999999999999, -1.175494e-38, "
    "-2.2250738585072014e-308, b'0', b'0', b'0', '1000-01-01', '1000-01-01 00:00:00', "
    "'1000-01-01 00:00:00.000000', '1970-01-01 00:00:01', '1970-01-01 00:00:01.000000', "
    "'-838:59:59', '-838:59:59.000000', 1901, '', '', '', X'00', '', '', 'a', '', '[]', "
    "ST_GeomFromText('POINT(-1.5 2.25)')"
)
ODD = (
    "0, 1, 0, 1, 0, 1, 0, 1, 0, 9223372036854775808, 1, 0.01, 0.0000000001, "
    "0.000000000000000000000000000001, -0.0, 5e-324, NULL, b'10101', NULL, '0000-00-00', "
    "'2024-02-29 12:00:00', '0000-00-00 00:00:00.000000', NULL, '2024-06-30 23:59:59.5', "
    "'-00:00:01', '-00:00:00.000001', 0, 'trailing  ', NULL, NULL, X'0102', NULL, NULL, NULL, '', "
    "'null', NULL"
)
NULLS = ", ".join(["NULL"] * 37)


@pytest.fixture
def config(mariadb: PrivateMariaDB, database: str, tmp_path: Path) -> PipelineConfig:
    return PipelineConfig.model_validate(pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work"))


def create_types(mariadb: PrivateMariaDB, database: str, config: PipelineConfig) -> CreateTable:
    """Table ``types`` of every column of ``COLUMNS``, rows 0-3: MAX, MIN, ODD, NULLS."""
    columns = ", ".join(f"{name} {mysql}" for name, mysql, *_ in COLUMNS)
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")  # zero dates exist only outside strict mode
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(f"CREATE TABLE types (id INT PRIMARY KEY, {columns})")
        for i, values in enumerate([MAX, MIN, ODD, NULLS]):
            cur.execute(f"INSERT INTO types VALUES ({i}, {values})")
    with contextlib.closing(connect(config.source)) as conn:
        (schema,) = discover(conn, [TableId(database, "types")])
    return schema


def read_both_ways(
    mariadb: PrivateMariaDB,
    database: str,
    config: PipelineConfig,
    schema: CreateTable,
    server_id: int,
    first_late: int = 2,
) -> ChunkResult:
    """The table read as the snapshot reads a chunk: rows with ``id`` below ``first_late`` through
    its SELECT, the others through the binlog (written between the watermarks)."""
    name = schema.table.quoted()
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE pending LIKE {name}")
        cur.execute(f"INSERT INTO pending SELECT * FROM {name} WHERE id >= {first_late}")
        late_rows = cur.execute(f"DELETE FROM {name} WHERE id >= {first_late}")

    def late(_: Chunk) -> None:
        mariadb.execute(
            "SET SESSION sql_mode = ''", f"INSERT INTO {name} SELECT * FROM pending", database=database
        )

    chunk = Chunk(schema.table, 0, "id", ChunkRange.all())
    with ChunkReader(config.source, schema, server_id, SnapshotHooks(after_select=late)) as reader:
        result = reader.read(chunk)
    assert result.binlog_changes == late_rows > 0
    return result


def test_every_type_round_trips(mariadb: PrivateMariaDB, database: str, config: PipelineConfig) -> None:
    schema = create_types(mariadb, database, config)
    applier = IcebergMetadataApplier(open_catalog(config), lambda t: sink_identifier(config, t))
    applier.apply(schema)
    table = applier.catalog.load_table(applier.identifier(schema.table))
    for name, _, iceberg, *_ in COLUMNS:
        assert isinstance(table.schema().find_field(name).field_type, iceberg), name
    assert [table.schema().find_column_name(i) for i in table.schema().identifier_field_ids] == ["id"]

    # Both read paths, committed as a Parquet file the way the snapshot job does.
    result = read_both_ways(mariadb, database, config, schema, 6200)
    path = Path(table.location().removeprefix("file://")) / "data" / "types-0.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(result.data, path)
    writer = IcebergWriter(applier.catalog, applier.identifier(schema.table))
    writer.append_files([f"file://{path}"], [ChunkCommit("types#0", result.high, result.row_count)])

    got = {r["id"]: r for r in writer.table.scan().to_arrow().to_pylist()}
    expressions = ", ".join(sql for _, _, _, sql, _ in COLUMNS)
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(f"SELECT id, {expressions} FROM types ORDER BY id")
        expected = cur.fetchall()
    assert sorted(got) == [0, 1, 2, 3]
    for row in expected:
        for (name, _, _, _, render), want in zip(COLUMNS, row[1:], strict=True):
            value = got[row[0]][name]
            if name in ("f", "db") and want is not None:
                assert float(want) == value, (row[0], name, value, want)  # exact, bit for bit
                continue
            assert render(value) == (None if want is None else str(want)), (row[0], name, value, want)


@pytest.mark.parametrize(
    ("library", "truth"),
    [
        (dt.timedelta(microseconds=-999_999), -1),  # -00:00:00.000001
        (dt.timedelta(seconds=-1, microseconds=-750_000), -1_250_000),  # -00:00:01.25
        (dt.timedelta(seconds=-3723, microseconds=-1), -3_723_999_999),  # -01:02:03.999999
        (dt.timedelta(seconds=-2), -2_000_000),  # no fraction: already right
        (dt.timedelta(seconds=-0.5), -500_000),  # f = 1 - f
        (dt.timedelta(seconds=3, microseconds=5), 3_000_005),  # positive: already right
    ],
)
def test_negative_time_fractions_from_the_binlog_are_corrected(library: dt.timedelta, truth: int) -> None:
    from binlake.events import Column
    from binlake.schema.type_mapping import binlog_converter

    convert = binlog_converter(Column("t", "time", "time(6)", fsp=6))
    assert convert is not None
    assert convert(library) == truth
