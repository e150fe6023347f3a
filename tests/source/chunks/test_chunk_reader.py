"""The lock-free chunk reader: writes between the watermarks are corrected from the binlog.

Each hook test writes while a chunk is being read, then compares the chunk's result with the
range's content read afterwards (nothing else writes in between, so that is the content at the
high watermark).
"""

from __future__ import annotations

import contextlib
import struct
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from binlake.config import SourceConfig
from binlake.events import CreateTable, TableId
from binlake.schema.type_mapping import RowConverter
from binlake.source.binlog.change_reader import BinlogReader
from binlake.source.chunks.reader import ChunkReader, ChunkReadError, ChunkResult, SnapshotHooks
from binlake.source.chunks.splitter import Chunk, ChunkRange, ChunkSplitter, SplitPlan
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import connect, server_version
from binlake.source.server.discovery import discover
from binlake.testing import demo, demo_rows
from binlake.testing.private_server import PrivateMariaDB
from tests.conftest import ServerFactory
from tests.helpers import hold_commit, source_config

SERVER_ID = 6100


@pytest.fixture
def source(mariadb: PrivateMariaDB, database: str) -> SourceConfig:
    return source_config(mariadb, database, fetch_size=7)


def schema_of(source: SourceConfig, database: str, table: str) -> CreateTable:
    with contextlib.closing(connect(source)) as conn:
        (schema,) = discover(conn, [TableId(database, table)])
    return schema


def plan_of(
    source: SourceConfig, schema: CreateTable, chunk_size: int, chunk_key: str | None = None
) -> SplitPlan:
    with contextlib.closing(connect(source)) as conn:
        return ChunkSplitter(conn, chunk_size).split(schema, chunk_key)


def range_now(source: SourceConfig, schema: CreateTable, chunk: Chunk) -> list[dict[str, Any]]:
    """The chunk's range as it is now, read and normalised the SELECT way."""
    converter = RowConverter(schema)
    where, params = chunk.where()
    with contextlib.closing(connect(source)) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(f"SELECT * FROM {schema.table.quoted()} WHERE {where}", params)
        rows = cur.fetchall()
    return converter.batch(converter.select_columns(rows)).to_pylist()  # type: ignore[no-any-return]


def bag(rows: list[dict[str, Any]]) -> Counter[tuple[Any, ...]]:
    return Counter(tuple(sorted(r.items())) for r in rows)


def read(
    source: SourceConfig, schema: CreateTable, chunk: Chunk, **hooks: Callable[[Chunk], None]
) -> ChunkResult:
    with ChunkReader(source, schema, SERVER_ID, SnapshotHooks(**hooks)) as reader:
        return reader.read(chunk)


@pytest.fixture
def orders(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig
) -> Iterator[tuple[CreateTable, Chunk]]:
    """`orders` with ids 1..100 and the middle chunk [40, 60) of a plan with chunk size 20."""
    mariadb.execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, status VARCHAR(20), total DECIMAL(10,2))",
        "CREATE TABLE other (id INT PRIMARY KEY, v INT)",
        "INSERT INTO orders SELECT seq, 'new', seq * 1.5 FROM seq_1_to_100",
        "ANALYZE TABLE orders",
        database=database,
    )
    schema = schema_of(source, database, "orders")
    plan = plan_of(source, schema, 20)
    (chunk,) = [c for c in plan.chunks if c.range == ChunkRange(41, 61)]
    return schema, chunk


def test_chunk_without_writes_skips_the_binlog(
    source: SourceConfig, orders: tuple[CreateTable, Chunk]
) -> None:
    schema, chunk = orders
    result = read(source, schema, chunk)
    assert result.high == result.low
    assert result.binlog_changes == 0
    assert result.row_count == 20
    assert bag(result.data.to_pylist()) == bag(range_now(source, schema, chunk))


@pytest.mark.parametrize("step", ["after_low_watermark", "after_select"])
def test_writes_between_the_watermarks_are_applied(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig, orders: tuple[CreateTable, Chunk], step: str
) -> None:
    schema, chunk = orders

    def write(_: Chunk) -> None:
        mariadb.execute(
            # update in range
            "UPDATE orders SET status = 'paid', total = total + 1 WHERE id IN (41, 50, 60)",
            "DELETE FROM orders WHERE id IN (45, 46, 47)",  # delete in range
            "INSERT INTO orders VALUES (47, 'reborn', 2)",  # insert in range
            "INSERT INTO orders VALUES (1000, 'out', 1)",  # insert out of range
            "UPDATE orders SET id = 45 WHERE id = 80",  # key moves into the range
            "UPDATE orders SET id = 2000 WHERE id = 55",  # key moves out of the range
            "INSERT INTO other VALUES (1, 1)",  # another table
            "BEGIN",
            "DELETE FROM orders WHERE id = 59",
            "INSERT INTO orders VALUES (59, 'again', 5)",  # delete + insert in one transaction
            "COMMIT",
            database=database,
        )

    result = read(source, schema, chunk, **{step: write})
    assert result.high > result.low
    assert result.binlog_changes > 0
    expected = range_now(source, schema, chunk)
    assert bag(result.data.to_pylist()) == bag(expected)
    ids = sorted(r["id"] for r in result.data.to_pylist())
    assert 45 in ids
    assert 55 not in ids
    assert 46 not in ids
    assert {r["id"]: r["status"] for r in result.data.to_pylist()}[59] == "again"
    assert {r["id"]: r["status"] for r in result.data.to_pylist()}[47] == "reborn"


def test_writes_before_the_low_watermark_are_in_the_select(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig, orders: tuple[CreateTable, Chunk]
) -> None:
    schema, chunk = orders
    result = read(
        source,
        schema,
        chunk,
        before_low_watermark=lambda _: mariadb.execute("DELETE FROM orders WHERE id = 42", database=database),
    )
    assert 42 not in [r["id"] for r in result.data.to_pylist()]
    assert bag(result.data.to_pylist()) == bag(range_now(source, schema, chunk))


def test_writes_after_the_high_watermark_are_not_applied(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig, orders: tuple[CreateTable, Chunk]
) -> None:
    schema, chunk = orders
    before = range_now(source, schema, chunk)
    result = read(
        source,
        schema,
        chunk,
        after_high_watermark=lambda _: mariadb.execute("DELETE FROM orders WHERE id = 43", database=database),
    )
    # The delete comes after the high watermark: the stream applies it, not the chunk.
    assert bag(result.data.to_pylist()) == bag(before)


@pytest.fixture
def views(mariadb: PrivateMariaDB, database: str, source: SourceConfig) -> tuple[CreateTable, Chunk]:
    """A table without primary key, split by a nullable chunk key; its first chunk holds the NULLs."""
    mariadb.execute(
        "CREATE TABLE views (customer_id INT NULL, url VARCHAR(50), KEY (customer_id))",
        "INSERT INTO views VALUES (NULL, '/'), (NULL, '/'), (1, '/a'), (1, '/a'), (1, '/a'), (2, '/b'),"
        " (3, '/c'), (4, '/d'), (5, '/e'), (6, '/f'), (7, '/g')",
        database=database,
    )
    schema = schema_of(source, database, "views")
    return schema, plan_of(source, schema, 4, chunk_key="customer_id").chunks[0]


def keyless_writes(mariadb: PrivateMariaDB, database: str) -> Callable[[Chunk], None]:
    """Writes to the first chunk of `views`, once (a re-read must not write again)."""
    done: list[bool] = []

    def write(_: Chunk) -> None:
        if not done:
            done.append(True)
            mariadb.execute(
                "DELETE FROM views WHERE customer_id = 1 LIMIT 1",  # one of three equal rows
                "UPDATE views SET url = '/z' WHERE customer_id IS NULL LIMIT 1",
                "INSERT INTO views VALUES (NULL, '/'), (1, '/a')",
                database=database,
            )

    return write


def test_quiet_keyless_chunk_is_read_once(source: SourceConfig, views: tuple[CreateTable, Chunk]) -> None:
    schema, chunk = views
    result = read(source, schema, chunk)
    assert result.binlog_changes == 0
    assert bag(result.data.to_pylist()) == bag(range_now(source, schema, chunk))


def test_keyless_chunk_falls_back_to_a_consistent_snapshot(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig, views: tuple[CreateTable, Chunk]
) -> None:
    schema, chunk = views
    first_writes = keyless_writes(mariadb, database)
    calls: list[int] = []
    at_snapshot: list[list[dict[str, Any]]] = []

    def write(c: Chunk) -> None:
        calls.append(1)
        if len(calls) == 1:
            first_writes(c)  # hits the range during the first read: not exact, read again
        else:
            # Called again right after the snapshot was taken: this write is after the chunk's
            # position, so the chunk must not hold it (the stream applies it).
            at_snapshot.append(range_now(source, schema, c))
            mariadb.execute("INSERT INTO views VALUES (NULL, '/late')", database=database)

    result = read(source, schema, chunk, after_low_watermark=write)
    assert len(calls) == 2
    assert result.low == result.high  # a consistent snapshot's position is both watermarks
    assert result.binlog_changes == 0
    assert bag(result.data.to_pylist()) == bag(at_snapshot[0])
    assert bag(result.data.to_pylist()) != bag(range_now(source, schema, chunk))


def test_keyless_chunk_is_read_again_when_writes_hit_its_range(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig, views: tuple[CreateTable, Chunk]
) -> None:
    schema, chunk = views
    write = keyless_writes(mariadb, database)
    with ChunkReader(source, schema, SERVER_ID, SnapshotHooks(after_low_watermark=write), False) as reader:
        result = reader.read(chunk)
    assert result.binlog_changes == 0  # the second read saw no write between its watermarks
    assert bag(result.data.to_pylist()) == bag(range_now(source, schema, chunk))


def test_keyless_chunk_that_never_settles_is_refused(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig, views: tuple[CreateTable, Chunk]
) -> None:
    schema, chunk = views

    def always(_: Chunk) -> None:
        mariadb.execute("INSERT INTO views VALUES (NULL, '/busy')", database=database)

    with ChunkReader(source, schema, SERVER_ID, SnapshotHooks(after_select=always), False) as reader:
        with pytest.raises(ChunkReadError, match=r"no primary key, and writes hit the chunk's range"):
            reader.read(chunk)


def test_case_insensitive_text_key_ranges(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig
) -> None:
    mariadb.execute(
        "CREATE TABLE coupons (code VARCHAR(20) COLLATE utf8mb4_general_ci PRIMARY KEY, pct INT)",
        "INSERT INTO coupons VALUES ('alpha', 1), ('Bravo', 2), ('charlie', 3), ('Delta', 4), ('echo', 5),"
        " ('Foxtrot', 6), ('golf', 7), ('Hotel', 8)",
        database=database,
    )
    schema = schema_of(source, database, "coupons")
    plan = plan_of(source, schema, 3)
    middle = plan.chunks[1]  # ['Delta', 'golf') in the collation's order

    def write(_: Chunk) -> None:
        # 'dz' and 'Ezra' sort inside the middle range under *_ci, but outside it in Python's order.
        mariadb.execute(
            "INSERT INTO coupons VALUES ('dz', 9), ('Ezra', 10), ('ALPHA2', 11), ('zulu', 12)",
            "UPDATE coupons SET pct = 50 WHERE code = 'ECHO'",
            database=database,
        )

    result = read(source, schema, middle, after_select=write)
    assert bag(result.data.to_pylist()) == bag(range_now(source, schema, middle))
    assert {"dz", "Ezra"} <= {r["code"] for r in result.data.to_pylist()}


def test_every_demo_type_reads_the_same_through_select_and_binlog(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig
) -> None:
    # All demo rows are written *after* the start offset, so they reach binlake through the
    # binlog only; normalised, they must equal a SELECT of the same rows, type by type.
    demo.create_schema(mariadb.admin_connection(), database)
    size = demo.DemoSize.for_rows(700)
    for name, generator in demo_rows.row_stream(size, seed=3):
        schema = schema_of(source, database, name)
        rows = list(generator)

        def write(_: Chunk | None = None, name: str = name, rows: list[tuple[Any, ...]] = rows) -> None:
            with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
                cur.executemany(demo.insert_sql(name), rows)
                last = demo.COLUMNS[name][-1]
                cur.execute(f"UPDATE `{name}` SET `{last}` = `{last}` LIMIT 3")

        everything = Chunk(
            schema.table, 0, schema.primary_key[0] if schema.primary_key else "url", ChunkRange.all()
        )
        if schema.primary_key:
            # The chunk reader, with every row arriving between its watermarks.
            result = read(source, schema, everything, after_select=write)
            assert result.selected_rows == 0
            assert result.binlog_changes >= len(rows)
            got = result.data.to_pylist()
        else:
            # Keyless tables are not corrected from the binlog; check the binlog decoding directly.
            with contextlib.closing(connect(source)) as conn:
                start = current_offset(conn, server_version(conn))
                write()
                end = current_offset(conn, server_version(conn))
            converter = RowConverter(schema)
            reader = BinlogReader(source, SERVER_ID, start, end, {schema.table}, lambda _, c=converter: c)
            inserts = [c.after for c in reader.changes() if c.op == "insert"]
            got = converter.batch([[r[n] for r in inserts] for n in schema.column_names]).to_pylist()
        assert bag(got) == bag(range_now(source, schema, everything)), name


def test_table_dropped_between_plan_and_read(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig, orders: tuple[CreateTable, Chunk]
) -> None:
    schema, chunk = orders
    mariadb.execute("DROP TABLE orders", database=database)
    with pytest.raises(ChunkReadError, match=r"orders#\d+ .* no longer exists .*binlake plan --replan"):
        read(source, schema, chunk)


def test_binlog_purged_between_the_watermarks(
    mariadb_factory: Callable[..., PrivateMariaDB], tmp_path: Path
) -> None:
    server = mariadb_factory(**{"max-binlog-size": "4096"})
    server.execute(
        "CREATE DATABASE IF NOT EXISTS purge_db", "CREATE OR REPLACE TABLE purge_db.t (id INT PRIMARY KEY)"
    )
    server.execute("INSERT INTO purge_db.t VALUES (1), (2), (3)")
    source = source_config(server, "purge_db")
    schema = schema_of(source, "purge_db", "t")
    chunk = Chunk(schema.table, 0, "id", ChunkRange.all())

    def purge(_: Chunk) -> None:
        server.execute("INSERT INTO purge_db.t VALUES (4)", "FLUSH BINARY LOGS")
        current = server.query("SHOW MASTER STATUS")[0][0]
        # MariaDB keeps a file until its binlog checkpoint passes (under a second here).
        deadline = time.monotonic() + 20
        while server.query("SHOW BINARY LOGS")[0][0] != current:
            assert time.monotonic() < deadline, "the old binlog was never purged"
            server.execute(f"PURGE BINARY LOGS TO '{current}'")
            time.sleep(0.05)

    with pytest.raises(
        ChunkReadError, match=r"t#0 .*no longer has it.*oldest binlog file there is binlog\.\d+"
    ):
        read(source, schema, chunk, after_select=purge)


def test_no_lock_statement_is_ever_issued(
    mariadb: PrivateMariaDB,
    database: str,
    source: SourceConfig,
    orders: tuple[CreateTable, Chunk],
    tmp_path: Path,
) -> None:
    schema, _ = orders
    log_file = tmp_path / "general.log"
    mariadb.execute(f"SET GLOBAL general_log_file = '{log_file}'", "SET GLOBAL general_log = 1")
    try:
        plan = plan_of(source, schema, 20)
        with ChunkReader(source, schema, SERVER_ID) as reader:
            for chunk in plan.chunks:
                reader.read(chunk)
        mariadb.execute("UPDATE orders SET total = 0 WHERE id = 3", database=database)
        read(source, schema, plan.chunks[0])
    finally:
        mariadb.execute("SET GLOBAL general_log = 0")
    text = log_file.read_text().upper()
    assert "SHOW MASTER STATUS" in text  # the log did capture the reader's statements
    assert "BINLAKE@LOCALHOST" not in text  # connectorx stayed on TCP (the configured account)
    assert "`ORDERS` WHERE `ID` >= 21 AND `ID` < 41" in text  # the chunk SELECTs are there too
    for forbidden in ("FLUSH TABLES WITH READ LOCK", "LOCK TABLES", "LOCK INSTANCE", "FLUSH TABLES"):
        assert forbidden not in text


@pytest.mark.parametrize("reader", ["connectorx", "pymysql"])
def test_zero_dates_read_as_null_with_a_warning_or_are_refused(
    mariadb: PrivateMariaDB, database: str, reader: str, caplog: pytest.LogCaptureFixture
) -> None:
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("CREATE TABLE d (id INT PRIMARY KEY, day DATE, at DATETIME NULL)")
        cur.execute(
            "INSERT INTO d VALUES (1, '0000-00-00', NULL), (2, '2024-01-02', '0000-00-00 00:00:00'),"
            " (3, NULL, NULL)"
        )
    lenient = source_config(mariadb, database, select_reader=reader)
    schema = schema_of(lenient, database, "d")
    chunk = Chunk(schema.table, 0, "id", ChunkRange.all())

    def late_zero(_: Chunk) -> None:  # one more through the binlog
        mariadb.execute(
            "SET SESSION sql_mode = ''", "INSERT INTO d VALUES (4, '2024-00-00', NULL)", database=database
        )

    result = read(lenient, schema, chunk, after_select=late_zero)
    got = {r["id"]: (r["day"], r["at"]) for r in result.data.to_pylist()}
    assert got[1] == (None, None)
    assert got[2][1] is None
    assert got[4] == (None, None)
    assert "3 rows with zero dates in day, at read as NULL" in caplog.text

    strict = source_config(mariadb, database, select_reader=reader, zero_dates="reject")
    with pytest.raises(ChunkReadError, match=r"d#0 .* has 3 rows with zero dates .*source.zero_dates: null"):
        read(strict, schema, chunk)


def test_zero_dates_of_a_reread_keyless_chunk_are_counted_once(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig, caplog: pytest.LogCaptureFixture
) -> None:
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("CREATE TABLE k (c INT NULL, day DATE, KEY (c))")
        cur.execute("INSERT INTO k VALUES (1, '0000-00-00'), (2, '2024-01-01')")
    schema = schema_of(source, database, "k")
    chunk = Chunk(schema.table, 0, "c", ChunkRange.all())
    writes: list[int] = []

    def once(_: Chunk) -> None:  # forces a second read of the keyless chunk
        if not writes:
            writes.append(1)
            mariadb.execute("INSERT INTO k VALUES (3, '2024-01-02')", database=database)

    result = read(source, schema, chunk, after_select=once)
    assert result.zero_date_rows == 1
    assert "1 rows with zero dates in day read as NULL" in caplog.text


# -- the binlog's hard cases between the watermarks --------------------------------------------------


def test_a_commit_the_engine_has_not_made_visible_at_the_low_watermark_is_not_lost(
    mariadb_factory: ServerFactory,
) -> None:
    # Semi-sync (AFTER_SYNC, no replica) holds the insert of 50: in the binlog before the low
    # watermark is read, invisible to the SELECT. The chunk must still hold it.
    server = mariadb_factory(**{"rpl-semi-sync-master-wait-point": "AFTER_SYNC"})
    database = _fresh(server, "held")
    server.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, 0 FROM seq_1_to_40",
        database=database,
    )
    source = source_config(server, database)
    schema = schema_of(source, database, "t")
    chunk = Chunk(schema.table, 0, "id", ChunkRange(None, None))
    with hold_commit(server, f"INSERT INTO `{database}`.t VALUES (50, 5)"):
        result = read(source, schema, chunk)
        assert 50 not in {r["id"] for r in range_now(source, schema, chunk)}  # still invisible
    assert {r["id"]: r["v"] for r in result.data.to_pylist()}[50] == 5
    assert bag(result.data.to_pylist()) == bag(range_now(source, schema, chunk))


def test_a_keyless_chunk_reads_in_its_snapshot_under_read_committed_and_floats_stay_exact(
    mariadb_factory: ServerFactory,
) -> None:
    server = mariadb_factory(**{"transaction-isolation": "READ-COMMITTED"})
    database = _fresh(server, "rc")
    server.execute(
        "CREATE TABLE m (k INT, f FLOAT, KEY (k))",
        "INSERT INTO m VALUES (1, 1234.5678), (1, 1234.5678), (2, -0.000123457), (3, 3.4e38)",
        database=database,
    )
    source = source_config(server, database, select_reader="pymysql")
    schema = schema_of(source, database, "m")
    chunk = Chunk(schema.table, 0, "k", ChunkRange(None, None))
    calls: list[int] = []

    def write(_: Chunk) -> None:
        calls.append(1)
        if len(calls) == 1:  # the first read's window: the chunk is read again in a snapshot
            server.execute("DELETE FROM m WHERE f > 1e38", database=database)
        else:  # after the snapshot was taken: not in the chunk, whatever the server's isolation
            server.execute("INSERT INTO m VALUES (9, 9.5)", database=database)

    result = read(source, schema, chunk, after_low_watermark=write)
    assert result.low == result.high
    stored = server.query("SELECT k, CAST(f AS DOUBLE) FROM m WHERE k < 9 ORDER BY k, f", database=database)
    assert sorted((r["k"], r["f"]) for r in result.data.to_pylist()) == [tuple(r) for r in stored]
    assert struct.pack("<f", 1234.5678) == struct.pack("<f", result.data.to_pylist()[0]["f"])


def test_rows_logged_as_a_statement_between_the_watermarks_make_the_chunk_read_again(
    mariadb: PrivateMariaDB, database: str, source: SourceConfig, orders: tuple[CreateTable, Chunk]
) -> None:
    schema, chunk = orders
    calls: list[int] = []

    def write(_: Chunk) -> None:
        calls.append(1)
        if len(calls) == 1:
            with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
                cur.execute("SET SESSION binlog_format = 'STATEMENT'")
                cur.execute("UPDATE orders SET status = 'by statement' WHERE id BETWEEN 41 AND 50")

    result = read(source, schema, chunk, after_select=write)
    assert len(calls) == 2  # read again, from watermarks after the statement
    assert bag(result.data.to_pylist()) == bag(range_now(source, schema, chunk))
    assert {r["status"] for r in result.data.to_pylist() if r["id"] <= 50} == {"by statement"}


@pytest.mark.parametrize("image", ["MINIMAL", "NOBLOB"])
def test_updates_without_every_column_keep_the_rows_other_values(
    mariadb: PrivateMariaDB,
    database: str,
    source: SourceConfig,
    orders: tuple[CreateTable, Chunk],
    image: str,
) -> None:
    schema, chunk = orders

    def write(_: Chunk) -> None:
        with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
            cur.execute(f"SET SESSION binlog_row_image = '{image}'")
            cur.execute("UPDATE orders SET status = 'minimal' WHERE id IN (42, 43)")
            cur.execute("UPDATE orders SET id = id + 1000 WHERE id = 44")  # a key update
            cur.execute("DELETE FROM orders WHERE id = 45")

    result = read(source, schema, chunk, after_select=write)
    assert result.binlog_changes > 0
    assert bag(result.data.to_pylist()) == bag(range_now(source, schema, chunk))


def _fresh(server: PrivateMariaDB, name: str) -> str:
    database = f"{name}_{uuid.uuid4().hex[:8]}"
    server.execute(f"CREATE DATABASE `{database}`")
    return database
