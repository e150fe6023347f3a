"""binlake's row decoder against python-mysql-replication + ``RowConverter`` on the same events.

The library's values, normalised, are checked against the server itself for every type by
``tests/schema/test_type_round_trip.py``; here the decoder must produce exactly the same tuples
(same types, same Decimal exponents, same zero-date count) for every type it reads, and mark the
columns an image without every column lacks as ``ABSENT`` (where the library gives NULL).
"""

from __future__ import annotations

import contextlib
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.schema.type_mapping import RowConverter
from binlake.source.binlog.change_reader import BinlogReader
from binlake.source.binlog.row_decoder import ABSENT
from binlake.source.server.connection import connect
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import binlog_range, source_config

COLUMNS = [
    ("ti", "TINYINT"), ("tiu", "TINYINT UNSIGNED"), ("si", "SMALLINT"), ("siu", "SMALLINT UNSIGNED"),
    ("mi", "MEDIUMINT"), ("miu", "MEDIUMINT UNSIGNED"), ("i", "INT"), ("iu", "INT UNSIGNED"),
    ("bi", "BIGINT"), ("biu", "BIGINT UNSIGNED"), ("flag", "BOOL"),
    ("d5", "DECIMAL(5,0)"), ("d9", "DECIMAL(9,9)"), ("d2", "DECIMAL(10,2)"), ("d18", "DECIMAL(18,9)"),
    ("d38", "DECIMAL(38,10)"), ("d65", "DECIMAL(65,30)"), ("f", "FLOAT"), ("db", "DOUBLE"),
    ("b1", "BIT(1)"), ("b5", "BIT(5)"), ("b64", "BIT(64)"), ("dd", "DATE"),
    ("dt0", "DATETIME"), ("dt1", "DATETIME(1)"), ("dt3", "DATETIME(3)"), ("dt6", "DATETIME(6)"),
    ("ts0", "TIMESTAMP NULL"), ("ts2", "TIMESTAMP(2) NULL"), ("ts6", "TIMESTAMP(6) NULL"),
    ("t0", "TIME"), ("t1", "TIME(1)"), ("t2", "TIME(2)"), ("t3", "TIME(3)"), ("t4", "TIME(4)"),
    ("t5", "TIME(5)"), ("t6", "TIME(6)"), ("y", "YEAR"), ("c", "CHAR(10)"),
    ("vl", "VARCHAR(20) CHARACTER SET latin1"), ("vlong", "VARCHAR(300)"), ("tx", "TEXT"),
    ("mt", "MEDIUMTEXT"), ("bn", "BINARY(8)"), ("vb", "VARBINARY(20)"), ("bl", "BLOB"),
    ("e", "ENUM('a','b','ç')"), ("st", "SET('x','y','z')"), ("g", "GEOMETRY NULL"),
]  # fmt: skip
ROWS = [
    "127, 255, 32767, 65535, 8388607, 16777215, 2147483647, 4294967295, 9223372036854775807, "
    "18446744073709551615, 1, 99999, 0.999999999, 99999999.99, 999999999.999999999, "
    "9999999999999999999999999999.9999999999, "
    "99999999999999999999999999999999999.999999999999999999999999999999, 3.402823e38, "
    "1.7976931348623157e308, b'1', b'11111', "
    "b'1111111111111111111111111111111111111111111111111111111111111111', "
    "'9999-12-31', '9999-12-31 23:59:59', '9999-12-31 23:59:59.9', '9999-12-31 23:59:59.999', "
    "'9999-12-31 23:59:59.999999', '2038-01-19 03:14:07', '2038-01-19 03:14:07.99', "
    "'2038-01-19 03:14:07.999999', '838:59:59', '838:59:59.9', '838:59:59.99', '838:59:59.999', "
    "'838:59:59.9999', '838:59:59.99999', '838:59:59.999999', 2155, 'emoji 🎉', 'crème brûlée', "
    "REPEAT('é', 300), REPEAT('long ', 1000), REPEAT('m', 70000), X'FFFFFFFFFFFFFFFF', X'00FF00', "
    "X'DEADBEEF', 'ç', 'x,y,z', ST_GeomFromText('POLYGON((0 0, 1 0, 1 1, 0 0))')",
    "-128, 0, -32768, 0, -8388608, 0, -2147483648, 0, -9223372036854775808, 0, 0, -99999, "
    "-0.999999999, -99999999.99, -999999999.999999999, -9999999999999999999999999999.9999999999, "
    "-99999999999999999999999999999999999.999999999999999999999999999999, -1.175494e-38, "
    "-2.2250738585072014e-308, b'0', b'0', b'0', '1000-01-01', '1000-01-01 00:00:00', "
    "'1000-01-01 00:00:00.1', '1000-01-01 00:00:00.001', '1000-01-01 00:00:00.000001', "
    "'1970-01-01 00:00:01', '1970-01-01 00:00:01.01', '1970-01-01 00:00:01.000001', '-838:59:59', "
    "'-838:59:59.9', '-838:59:59.99', '-838:59:59.999', '-838:59:59.9999', '-838:59:59.99999', "
    "'-838:59:59.999999', 1901, '', '', '', '', '', X'00', '', '', 'a', '', "
    "ST_GeomFromText('POINT(-1.5 2.25)')",
    "0, 1, 0, 1, 0, 1, 0, 1, 0, 9223372036854775808, 1, 0, 0.000000001, 0.01, -0.000000001, "
    "0.0000000001, 0.000000000000000000000000000001, -0.0, 5e-324, NULL, b'10101', NULL, '0000-00-00', "
    "'2024-02-29 12:00:00', '2024-02-29 12:00:00.5', '0000-00-00 00:00:00.000', "
    "'0000-00-00 00:00:00.000000', NULL, '2024-06-30 23:59:59.5', '2024-06-30 23:59:59.5', "
    "'-00:00:01', '-00:00:01.5', '-00:00:00.25', '-00:00:01.125', '-00:00:00.0001', "
    "'-00:00:01.00001', '-00:00:00.000001', 0, 'trailing  ', NULL, NULL, NULL, '', X'0102', NULL, "
    "NULL, NULL, '', NULL",
    ", ".join(["NULL"] * len(COLUMNS)),
]


def _library(source: Any, start: BinlogOffset, end: BinlogOffset, convert: RowConverter) -> list[Any]:
    """The rows as python-mysql-replication decodes them, normalised like before the decoder."""
    stream = BinLogStreamReader(
        connection_settings={
            "host": source.hostname,
            "port": source.port,
            "user": source.username,
            "password": source.password.get_secret_value(),
        },
        server_id=6301,
        log_file=start.file,
        log_pos=start.pos,
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_tables=[convert.table.table.table],
        only_schemas=[convert.table.table.database],
        enable_logging=False,
    )
    image = convert.binlog_row
    rows: list[Any] = []
    for event in stream:
        if BinlogOffset(stream.log_file, stream.log_pos) > end:
            break
        for row in event.rows:
            if isinstance(event, UpdateRowsEvent):
                before = image(row["before_values"], row["before_none_sources"])
                rows.append(("update", before, image(row["after_values"], row["after_none_sources"])))
            elif isinstance(event, WriteRowsEvent):
                rows.append(("insert", None, image(row["values"], row["none_sources"])))
            else:
                rows.append(("delete", image(row["values"], row["none_sources"]), None))
    stream.close()
    return rows


def _changes(mariadb: PrivateMariaDB, database: str, columns: list[tuple[str, str]], rows: list[str],
             extra: list[str] = ()) -> tuple[BinlogOffset, BinlogOffset]:  # fmt: skip
    setup = [
        "SET SESSION sql_mode = '', time_zone = '+00:00'",
        f"CREATE TABLE t (id INT PRIMARY KEY, {', '.join(f'{n} {t}' for n, t in columns)})",
    ]
    return binlog_range(mariadb, database, setup, [
        *(f"INSERT INTO t VALUES ({i}, {values})" for i, values in enumerate(rows)),
        f"INSERT INTO t SELECT id + 10, {', '.join(n for n, _ in columns)} FROM t",
        f"UPDATE t SET {columns[0][0]} = NULL WHERE id >= 10",  # non-key update
        "UPDATE t SET id = id + 100 WHERE id < 10",  # key update
        *extra,
        "DELETE FROM t",
    ])  # fmt: skip


def _decoded(
    source: Any, start: BinlogOffset, end: BinlogOffset, convert: RowConverter, lean: bool
) -> list[Any]:
    reader = BinlogReader(source, 6302, start, end, {convert.table.table}, lambda _: convert, lean=lean)
    return [(r.op, r.before, r.after) for r in reader.rows()]


def _schema(mariadb: PrivateMariaDB, database: str) -> Any:
    with contextlib.closing(connect(source_config(mariadb, database))) as conn:
        (schema,) = discover(conn, [TableId(database, "t")])
    return schema


def test_decoder_matches_the_library_for_every_type(mariadb: PrivateMariaDB, database: str) -> None:
    start, end = _changes(mariadb, database, COLUMNS, ROWS)
    source = source_config(mariadb, database)
    schema = _schema(mariadb, database)
    ours, theirs = RowConverter(schema), RowConverter(schema)
    decoded = _decoded(source, start, end, ours, lean=False)
    expected = _library(source, start, end, theirs)
    # 4 + 4 inserts, 3 updates (the all-NULL copy does not change), 4 key updates, 8 deletes
    assert len(decoded) == 23
    for got, want in zip(decoded, expected, strict=True):
        assert repr(got) == repr(want)  # repr: Decimal exponents and value types must match too
    assert ours.zero_dates == theirs.zero_dates > 0


def test_lean_images_carry_the_key_only(mariadb: PrivateMariaDB, database: str) -> None:
    start, end = _changes(mariadb, database, COLUMNS, ROWS)
    source = source_config(mariadb, database)
    schema = _schema(mariadb, database)
    full = _decoded(source, start, end, RowConverter(schema), lean=False)
    lean = _decoded(source, start, end, RowConverter(schema), lean=True)
    width = len(COLUMNS) + 1
    for (op, before, after), (lean_op, lean_before, lean_after) in zip(full, lean, strict=True):
        assert (lean_op, lean_after) == (op, after)
        if before is not None:
            assert lean_before == (before[0],) + (None,) * (width - 1)


def test_images_without_every_column_mark_what_they_lack(mariadb: PrivateMariaDB, database: str) -> None:
    # A MINIMAL session: updates log the key (before) and the changed column (after) only.
    columns = [("v", "VARCHAR(10)"), ("j", "JSON"), ("d", "DECIMAL(8,3)")]
    rows = ["'a', '{\"k\": [1, {\"ü\": null}]}', 12.5", "NULL, '[]', -0.001"]
    minimal = ["SET SESSION binlog_row_image = 'MINIMAL'", "UPDATE t SET v = 'm' WHERE id < 100"]
    start, end = _changes(mariadb, database, columns, rows, minimal)
    source = source_config(mariadb, database)
    schema = _schema(mariadb, database)
    decoded = _decoded(source, start, end, RowConverter(schema), lean=False)
    expected = _library(source, start, end, RowConverter(schema))
    assert len(decoded) == len(expected)
    for got, want in zip(decoded, expected, strict=True):  # values present: the library's
        assert repr(_absent_as_none(got, want)) == repr(want)
    # The two MINIMAL updates: the key comes from the before image, `v` is what the statement
    # set, `j` and `d` are not NULL but absent: the row keeps what it held.
    updates = [after for op, _, after in decoded if op == "update" and after and ABSENT in after]
    assert updates == [(10, "m", ABSENT, ABSENT), (11, "m", ABSENT, ABSENT)]
    # The MINIMAL deletes carry the key alone.
    deletes = [before for op, before, _ in decoded if op == "delete" and before and ABSENT in before]
    assert [d[1:] for d in deletes] == [(ABSENT, ABSENT, ABSENT)] * 4


def _absent_as_none(change: Any, library: Any) -> Any:
    """Our change as the library gives it: NULL where we say absent, and NULL where an update's
    after image took a value from its before image (the library leaves those NULL)."""
    op, before, after = change
    clean = [None if i is None else tuple(None if v is ABSENT else v for v in i) for i in (before, after)]
    if op == "update" and ABSENT in (before or ()):
        clean[1] = tuple(None if w is None else v for v, w in zip(clean[1], library[2], strict=True))
    return (op, *clean)
