"""The column decoder against the row decoder, through the stream's change tables.

Both read the same binlog range; the executors' envelope (``RecordBuilder``) is built once from
row images, once from undecoded events decoded a block at a time, and the change tables the
driver gets must be equal: every value and type, the ops (a key update is a delete and an
update, other keyed updates their after image alone), positions, row order, lean images, NULLs
and the zero-date count.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import TableId, table_to_dict
from binlake.offsets import BinlogOffset
from binlake.schema.type_mapping import RowConverter
from binlake.source.binlog.change_reader import BinlogReader
from binlake.source.binlog.column_decoder import ColumnBlock, RawRows
from binlake.source.server.connection import connect
from binlake.source.server.discovery import discover
from binlake.spark.stream_task import read_segment
from binlake.stream.records import ENVELOPE_SCHEMA, RecordBuilder, table_changes
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import binlog_range, pipeline_dict, source_config

COLUMNS = [
    ("ti", "TINYINT"), ("tiu", "TINYINT UNSIGNED"), ("si", "SMALLINT"), ("siu", "SMALLINT UNSIGNED"),
    ("mi", "MEDIUMINT"), ("miu", "MEDIUMINT UNSIGNED"), ("i", "INT"), ("iu", "INT UNSIGNED"),
    ("bi", "BIGINT"), ("flag", "BOOL"), ("d5", "DECIMAL(5,0)"), ("d9", "DECIMAL(9,9)"),
    ("d2", "DECIMAL(10,2)"), ("d18", "DECIMAL(18,9)"), ("d181", "DECIMAL(18,1)"), ("f", "FLOAT"),
    ("db", "DOUBLE"), ("dd", "DATE"), ("dt0", "DATETIME"), ("dt1", "DATETIME(1)"),
    ("dt3", "DATETIME(3)"), ("dt6", "DATETIME(6)"), ("ts0", "TIMESTAMP NULL"),
    ("ts2", "TIMESTAMP(2) NULL"), ("ts6", "TIMESTAMP(6) NULL"), ("c", "CHAR(10)"),
    ("vs", "VARCHAR(20)"), ("vlong", "VARCHAR(300)"), ("tx", "TEXT"), ("mt", "MEDIUMTEXT"),
    ("vb", "VARBINARY(20)"), ("bl", "BLOB"),
]  # fmt: skip
ROWS = [
    "127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807, 1, "
    "99999, 0.999999999, 99999999.99, 999999999.999999999, 99999999999999999.9, 3.402823e38, "
    "1.7976931348623157e308, '9999-12-31', '9999-12-31 23:59:59', '9999-12-31 23:59:59.9', "
    "'9999-12-31 23:59:59.999', '9999-12-31 23:59:59.999999', '2038-01-19 03:14:07', "
    "'2038-01-19 03:14:07.99', '2038-01-19 03:14:07.999999', 'emoji 🎉', 'crème brûlée', "
    "REPEAT('é', 300), REPEAT('long ', 1000), REPEAT('m', 70000), X'00FF00', X'DEADBEEF'",
    "-128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, -99999, "
    "-0.999999999, -99999999.99, -999999999.999999999, -99999999999999999.9, -1.175494e-38, "
    "-2.2250738585072014e-308, '1000-01-01', '1000-01-01 00:00:00', '1000-01-01 00:00:00.1', "
    "'1000-01-01 00:00:00.001', '1000-01-01 00:00:00.000001', '1970-01-01 00:00:01', "
    "'1970-01-01 00:00:01.01', '1970-01-01 00:00:01.000001', '', '', '', '', '', X'00', ''",
    "0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 0.000000001, 0.01, -0.000000001, -0.1, -0.0, 5e-324, "
    "'0000-00-00', '2024-02-29 12:00:00', '2024-02-30 12:00:00.5', '0000-00-00 00:00:00.000', "
    "'2023-11-00 00:00:00.000001', 0, '2024-06-30 23:59:59.5', NULL, 'trailing  ', NULL, 'x', "
    "NULL, '', X'0102', NULL",
    "1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 12345, 0.5, -1234.56, 123456789.123456789, 1.5, 1.25, -2.5, "
    "'2000-02-29', '2023-02-29 23:59:59', '1900-02-29 00:00:00.5', '2024-01-01 00:00:00.125', "
    "'1969-07-20 20:17:40.123456', '2000-01-01 00:00:00', '2000-01-01 00:00:00.25', NULL, 'a', "
    "'ü', 'b', 'c', 'd', X'61', X'62'",
    ", ".join(["NULL"] * len(COLUMNS)),
]


def _write(mariadb: PrivateMariaDB, database: str, key: str) -> tuple[BinlogOffset, BinlogOffset]:
    """Inserts, copies, a non-key update, a key update (keyed), then deletes of every row."""
    definition = ", ".join(f"{n} {t}" for n, t in COLUMNS)
    setup = [
        "SET SESSION sql_mode = 'ALLOW_INVALID_DATES', time_zone = '+00:00'",
        f"CREATE TABLE t (id INT NOT NULL{key}, {definition})",
    ]
    return binlog_range(mariadb, database, setup, [
        *(f"INSERT INTO t VALUES ({i}, {values})" for i, values in enumerate(ROWS)),
        f"INSERT INTO t SELECT id + 10, {', '.join(n for n, _ in COLUMNS)} FROM t",
        "UPDATE t SET vs = 'changed' WHERE id >= 10",
        "UPDATE t SET id = id + 100 WHERE id < 3",  # the key (or a whole row) changes
        "UPDATE t SET ti = 5, id = id WHERE id = 3",
        "DELETE FROM t WHERE id >= 100",
        "DELETE FROM t",
    ])  # fmt: skip


def _changes(
    source: Any,
    start: BinlogOffset,
    end: BinlogOffset,
    convert: RowConverter,
    columnar: bool,
    whole: bool = False,
) -> Any:
    """``whole``: the table keeps a changelog (whole before images, updates' ``before`` rows)."""
    table = convert.table.table
    befores = frozenset({table} if whole else ())
    reader = BinlogReader(
        source, 6311, start, end, {table}, lambda _: convert, lean=True, columnar=columnar, whole=befores
    )
    builder = RecordBuilder([convert.table], {}, befores)
    batches = []
    for event in reader.events():
        builder.add(event)
        if len(builder) >= 7:  # several blocks, so block boundaries are crossed too
            batches.append(builder.batch())
    batches.append(builder.batch())
    used = any(d.supported for d in reader._column_decoders.values())
    return table_changes(pa.Table.from_batches(batches, schema=ENVELOPE_SCHEMA))[table.name], used


def _schema(mariadb: PrivateMariaDB, database: str) -> Any:
    with contextlib.closing(connect(source_config(mariadb, database))) as conn:
        (schema,) = discover(conn, [TableId(database, "t")])
    return schema


def _written(mariadb: PrivateMariaDB, database: str, create: str, *statements: str) -> Any:
    return binlog_range(mariadb, database, [create], statements)


def _both(
    mariadb: PrivateMariaDB, database: str, start: BinlogOffset, end: BinlogOffset
) -> tuple[Any, Any, bool]:
    """The change tables by the row decoder and by the column decoder, and whether it took them."""
    source, schema = source_config(mariadb, database), _schema(mariadb, database)
    by_rows, _ = _changes(source, start, end, RowConverter(schema), columnar=False)
    by_columns, used = _changes(source, start, end, RowConverter(schema), columnar=True)
    return by_rows, by_columns, used


@pytest.mark.parametrize("whole", [False, True], ids=["lean", "changelog"])
@pytest.mark.parametrize("key", [" PRIMARY KEY", ""], ids=["keyed", "keyless"])
def test_columns_decode_to_the_row_decoders_changes(
    mariadb: PrivateMariaDB, database: str, key: str, whole: bool
) -> None:
    start, end = _write(mariadb, database, key)
    source = source_config(mariadb, database)
    schema = _schema(mariadb, database)
    rows_convert, columns_convert = RowConverter(schema), RowConverter(schema)
    by_rows, row_path_used_columns = _changes(source, start, end, rows_convert, columnar=False, whole=whole)
    by_columns, used = _changes(source, start, end, columns_convert, columnar=True, whole=whole)
    assert used  # every column type here is the column decoder's
    assert not row_path_used_columns
    assert by_columns.schema == by_rows.schema
    for name in by_rows.column_names:
        assert by_columns.column(name).to_pylist() == by_rows.column(name).to_pylist(), name
    assert by_columns.equals(by_rows)
    assert columns_convert.zero_dates == rows_convert.zero_dates > 0
    ops = by_rows.column("op").to_pylist()
    if key and whole:  # a changelog's: each update that kept its key has its before image, whole
        assert (ops.count("insert"), ops.count("update"), ops.count("delete")) == (10, 5 + 3 + 1, 3 + 10)
        assert ops.count("before") == 5 + 1
        befores = by_rows.filter(pa.compute.equal(by_rows.column("op"), "before"))
        images = befores.column("row").to_pylist()
        assert sum(any(v is not None for c, v in r.items() if c != "id") for r in images) >= 4  # not lean
        deletes = by_rows.filter(pa.compute.equal(by_rows.column("op"), "delete")).column("row").to_pylist()
        assert sum(row["vs"] == "changed" for row in deletes) == 5  # deletes carry the whole row
    elif key:  # keyed: the key updates are a delete and an update each, the others an update alone
        assert (ops.count("insert"), ops.count("update"), ops.count("delete")) == (10, 5 + 3 + 1, 3 + 10)
    else:  # keyless: every update removes its before image and inserts its after image
        assert (ops.count("insert"), ops.count("delete")) == (10 + 5 + 3 + 1, 5 + 3 + 1 + 10)


@pytest.mark.parametrize(
    "column", ["e ENUM('a', 'b')", "v VARCHAR(5) CHARACTER SET latin1", "u BIGINT UNSIGNED", "bn BINARY(4)"]
)
def test_tables_with_other_types_stay_with_the_row_decoder(
    mariadb: PrivateMariaDB, database: str, column: str
) -> None:
    start, end = _written(
        mariadb, database, f"CREATE TABLE t (id INT PRIMARY KEY, {column}, s VARCHAR(5))",
        "INSERT INTO t VALUES (1, DEFAULT, 'x'), (2, NULL, 'y')", "UPDATE t SET s = 'z'", "DELETE FROM t",
    )  # fmt: skip
    by_rows, by_columns, used = _both(mariadb, database, start, end)
    assert not used
    assert by_columns.equals(by_rows)
    assert by_rows.num_rows == 2 + 2 + 2


def test_narrow_tables_with_nulls_decode_alike(mariadb: PrivateMariaDB, database: str) -> None:
    # Up to 8 columns: a one-byte null bitmap (its own path), NULLs in every position.
    start, end = _written(
        mariadb, database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10), n INT, d DATETIME(3), w TEXT)",
        "INSERT INTO t VALUES (1, 'a', 1, '2024-01-02 03:04:05.678', 'x'), (2, NULL, 2, NULL, 'y'), "
        "(3, 'c', NULL, '2024-01-01', NULL), (4, NULL, NULL, NULL, NULL)",
        "UPDATE t SET v = CONCAT(IFNULL(v, ''), '!'), n = IF(n IS NULL, 7, NULL)",
        "UPDATE t SET id = id * 10 WHERE id > 2",
        "DELETE FROM t WHERE id <> 2",
    )  # fmt: skip
    by_rows, by_columns, used = _both(mariadb, database, start, end)
    assert used
    assert by_columns.to_pylist() == by_rows.to_pylist()
    assert by_columns.equals(by_rows)
    assert by_rows.num_rows == 4 + 4 + 2 * 2 + 3


def _narrow(mariadb: PrivateMariaDB, database: str) -> tuple[BinlogOffset, BinlogOffset]:
    return _written(
        mariadb, database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO t VALUES (1, 'a'), (2, NULL)", "UPDATE t SET v = 'b'",
    )  # fmt: skip


@pytest.mark.parametrize("columnar", [True, False])
def test_segments_read_alike_with_the_column_decoder_on_or_off(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, columnar: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks: list[int] = []
    add = ColumnBlock.add
    monkeypatch.setattr(ColumnBlock, "add", lambda self, *a: blocks.append(1) or add(self, *a))
    start, end = _narrow(mariadb, database)
    schema = _schema(mariadb, database)
    data = pipeline_dict(mariadb, [rf"{database}\.t"], tmp_path)
    config = PipelineConfig.model_validate({**data, "stream": {"column_decoder": columnar}})
    tables = json.dumps({schema.table.name: table_to_dict(schema)})
    batches = list(read_segment(config, 0, start.to_dict(), end.to_dict(), tables))
    changes = table_changes(pa.Table.from_batches(batches, schema=ENVELOPE_SCHEMA))[schema.table.name]
    by_rows, _ = _changes(source_config(mariadb, database), start, end, RowConverter(schema), columnar=False)
    assert changes.equals(by_rows)
    assert changes.column("op").to_pylist() == ["insert", "insert", "update", "update"]
    assert bool(blocks) is columnar  # the setting decides which decoder reads


def test_rows_the_column_decoder_cannot_walk_name_the_table_and_the_way_back(
    mariadb: PrivateMariaDB, database: str
) -> None:
    start, end = _narrow(mariadb, database)
    schema = _schema(mariadb, database)
    convert = RowConverter(schema)
    reader = BinlogReader(
        source_config(mariadb, database), 6312, start, end, {schema.table}, lambda _: convert, columnar=True
    )
    event = next(reader.events())
    assert isinstance(event.images, RawRows)
    cut = event._replace(images=event.images._replace(data=event.images.data[:-1]))
    with pytest.raises(BinlakeError, match=r"rows of .*\.t at .*stream\.column_decoder: false"):
        RecordBuilder([schema], {}).add(cut)


def test_text_values_are_gathered_in_place_and_must_come_in_layout_order() -> None:
    """``_strings`` copies values out of the block with Arrow (a binary array over the whole buffer
    that alternates values and the bytes between them); it relies on the values of one column
    coming one after another in the buffer, as row images do."""
    import numpy as np

    from binlake.source.binlog.column_decoder import _strings
    from binlake.source.binlog.column_specs import Spec

    text = b"..\x03abc....\x00..\x02de."
    buffer = np.frombuffer(text, np.uint8)
    spec = Spec(kind="text", width=0, prefix=1, arrow=pa.string())
    valid = np.array([True, False, True, True])
    at, lengths = np.array([2, 10, 13]), np.array([3, 0, 0, 2])
    assert _strings(buffer, at, lengths, valid, spec).to_pylist() == ["abc", None, "", "de"]
    with pytest.raises(ValueError, match="out of order"):
        _strings(buffer, at[::-1].copy(), np.array([2, 0, 0, 3]), valid, spec)
