"""Table maps parsed once per distinct body: the same layout as the library's own parse, a new one
whenever the table's shape changes."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from pymysql.protocol import MysqlPacket
from pymysqlreplication.packet import BinLogPacketWrapper
from pymysqlreplication.row_event import TableMapEvent

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.planner import discover_tables
from binlake.schema.type_mapping import RowConverter
from binlake.source.binlog import table_maps
from binlake.source.binlog.change_reader import BinlogReader, SchemaChangedError
from binlake.source.binlog.scan import open_stream
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import server_version
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import pipeline_dict, source_config


@pytest.fixture
def library_parse() -> Iterator[None]:
    """Each test starts from the library's own parsing and an empty cache, and leaves it installed."""
    table_maps.uninstall()
    yield
    table_maps.install()


def _offset(mariadb: PrivateMariaDB) -> BinlogOffset:
    with contextlib.closing(mariadb.admin_connection()) as conn:
        at = current_offset(conn, server_version(conn))
    return BinlogOffset(at.file, at.pos)


def _table_maps(
    mariadb: PrivateMariaDB, database: str, start: BinlogOffset, end: BinlogOffset, **only: Any
) -> list[Any]:
    stream = open_stream(
        source_config(mariadb, database),
        6301,
        start,
        only_events=[TableMapEvent],
        only_schemas=[database],
        **only,
    )
    try:
        return [e for e in stream if BinlogOffset(stream.log_file, stream.log_pos) <= end]
    finally:
        stream.close()


def _layout(event: Any) -> tuple[Any, ...]:
    return (
        event.table_id,
        event.schema,
        event.table,
        event.column_count,
        [c.data for c in event.columns],
        bytes(event.null_bitmask),
        vars(event.optional_metadata),
        event.table_obj.data,
    )


def _write(mariadb: PrivateMariaDB, database: str, *statements: str) -> tuple[BinlogOffset, BinlogOffset]:
    start = _offset(mariadb)
    mariadb.execute(*statements, database=database)
    return start, _offset(mariadb)


SHAPES = (
    "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(10) CHARACTER SET latin1, e ENUM('a','b'))",
    "INSERT INTO t VALUES (1, 'x', 'a')",
    "INSERT INTO t VALUES (2, 'y', 'b')",
    "UPDATE t SET name = 'z' WHERE id = 1",
    # Each changes the table map's bytes in a way a decoder must see: a length, a charset, enum
    # values, a name (same type: only FULL metadata's names differ).
    "ALTER TABLE t MODIFY name VARCHAR(300) CHARACTER SET latin1",
    "INSERT INTO t VALUES (3, REPEAT('w', 300), 'a')",
    "ALTER TABLE t MODIFY name VARCHAR(300) CHARACTER SET utf8mb4",
    "INSERT INTO t VALUES (4, 'v', 'b')",
    "ALTER TABLE t MODIFY e ENUM('a','b','c')",
    "INSERT INTO t VALUES (5, 'u', 'c')",
    "ALTER TABLE t RENAME COLUMN name TO label",
    "INSERT INTO t VALUES (6, 't', 'c')",
    "DELETE FROM t WHERE id = 2",
)


@pytest.mark.usefixtures("library_parse")
def test_a_cached_layout_is_the_library_parse_of_the_same_bytes(
    mariadb: PrivateMariaDB, database: str
) -> None:
    start, end = _write(mariadb, database, *SHAPES)
    parsed = _table_maps(mariadb, database, start, end)
    table_maps.install()
    cached = _table_maps(mariadb, database, start, end)
    again = _table_maps(mariadb, database, start, end)  # every body seen before
    assert len(parsed) == len(cached) == len(again) == 8
    assert [_layout(e) for e in cached] == [_layout(e) for e in parsed]
    assert [_layout(e) for e in again] == [_layout(e) for e in parsed]
    # Equal bodies share one layout (what keeps binlake's decoders): 3 writes before the first
    # ALTER, then one per shape, the last two (insert, delete) with the same one.
    tables = [e.table_obj for e in again]
    assert len({id(t) for t in tables}) == 5
    assert tables[0] is tables[1] is tables[2]
    assert tables[6] is tables[7]
    assert all(a.table_obj is b.table_obj for a, b in zip(cached, again, strict=True))
    assert [c.name for c in tables[-1].columns] == ["id", "label", "e"]


@pytest.mark.usefixtures("library_parse")
def test_a_reader_that_follows_other_tables_skips_a_cached_map(
    mariadb: PrivateMariaDB, database: str
) -> None:
    start, end = _write(
        mariadb,
        database,
        "CREATE TABLE t (id INT PRIMARY KEY)",
        "CREATE TABLE u (id INT PRIMARY KEY)",
        "INSERT INTO t VALUES (1)",
        "INSERT INTO u VALUES (1)",
    )
    table_maps.install()
    assert [e.table for e in _table_maps(mariadb, database, start, end)] == ["t", "u"]
    assert table_maps.cached_layouts() == 2
    assert [e.table for e in _table_maps(mariadb, database, start, end, only_tables=["u"])] == ["u"]
    assert _table_maps(mariadb, "other", start, end) == []


def test_a_rename_read_with_the_old_schema_is_refused_after_its_layout_was_cached(
    mariadb: PrivateMariaDB, database: str, tmp_path: Any
) -> None:
    """A rename keeps every column's type: only the names in the table map differ. A cache keyed on
    less than the whole body would hand the old names to the rows after it, and the reader would
    decode them into the old columns silently."""
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, a INT, b INT)", database=database)
    config = PipelineConfig.model_validate(pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path))
    (schema,) = discover_tables(config)
    converter = RowConverter(schema)
    table = TableId(database, "t")
    source = source_config(mariadb, database)
    start, before = _write(mariadb, database, "INSERT INTO t VALUES (1, 2, 3)")
    read = BinlogReader(source, 6302, start, before, {table}, lambda _: converter).rows()
    assert [r.after for r in read] == [(1, 2, 3)]
    _, end = _write(mariadb, database, "ALTER TABLE t RENAME COLUMN a TO c", "INSERT INTO t VALUES (2, 4, 5)")
    with pytest.raises(SchemaChangedError, match=r"columns \(id, c, b\)"):
        list(BinlogReader(source, 6303, start, end, {table}, lambda _: converter).rows())


def _parse(raw: bytes, table_map: dict[int, Any]) -> Any:
    """One table-map event from its packet bytes, as a binlog dump would hand it over."""
    ctl = SimpleNamespace(charset="utf8mb4", _get_dbms=lambda: "mariadb")
    wrapper = BinLogPacketWrapper(
        MysqlPacket(raw, "utf8mb4"), table_map, ctl, (10, 11, 0), True, frozenset([TableMapEvent]),
        None, None, None, None, False, False, False, True, False,
    )  # fmt: skip
    return wrapper.event


@pytest.mark.usefixtures("library_parse")
def test_a_table_id_given_to_another_layout_is_parsed_afresh(mariadb: PrivateMariaDB, database: str) -> None:
    """A server reuses table ids after a restart, for any table: the id is no key to a layout."""
    start, end = _write(
        mariadb,
        database,
        "CREATE TABLE t (id INT PRIMARY KEY, a INT)",
        "INSERT INTO t VALUES (1, 2)",
        "ALTER TABLE t RENAME COLUMN a TO c",
        "INSERT INTO t VALUES (2, 3)",
    )
    first, second = (
        bytes(e.packet.packet.get_all_data()) for e in _table_maps(mariadb, database, start, end)
    )
    second = second[:20] + first[20:26] + second[26:]  # the first's table id (6 bytes after the header)
    table_maps.install()
    table_map: dict[int, Any] = {}
    names = [[c.name for c in _parse(raw, table_map).columns] for raw in (first, second, first)]
    assert names == [["id", "a"], ["id", "c"], ["id", "a"]]
