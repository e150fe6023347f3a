"""Chunk splitting: the math at its edges without a database, then every key type on a real server.

The integration tests check the one property that matters: the chunks' rows, each selected with the
chunk's own WHERE condition, are the whole table with no row twice.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from binlake.events import TableId
from binlake.source.chunks.splitter import (
    ChunkKeyError,
    ChunkRange,
    ChunkSplitter,
    SplitPlan,
    choose_key_column,
    distribution_factor,
    rows_per_chunk,
    split_evenly,
)
from binlake.source.server.connection import connect
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import source_config

I64_MAX = 2**63 - 1
U64_MAX = 2**64 - 1

# -- pure math -----------------------------------------------------------------------------------


def test_even_split_covers_min_to_max_with_open_ends() -> None:
    assert split_evenly(1, 10, 3) == [
        ChunkRange(None, 4),
        ChunkRange(4, 7),
        ChunkRange(7, 10),
        ChunkRange(10, None),
    ]


def test_even_split_single_chunk_when_step_exceeds_span() -> None:
    assert split_evenly(5, 9, 5) == [ChunkRange.all()]
    assert split_evenly(5, 10, 5) == [ChunkRange(None, 10), ChunkRange(10, None)]


@pytest.mark.parametrize(
    ("low", "high", "step"),
    [
        (I64_MAX - 25, I64_MAX, 7),
        (-(2**63), -(2**63) + 20, 6),
        (U64_MAX - 30, U64_MAX, 8),
        (2**63, 2**63 + 9, 1),
    ],
)
def test_even_split_near_integer_limits(low: int, high: int, step: int) -> None:
    ranges = split_evenly(low, high, step)
    # Contiguous, strictly increasing, and every key in [low, high] falls in exactly one range.
    for a, b in itertools.pairwise(ranges):
        assert a.end == b.start
    for key in range(low, high + 1):
        hits = [r for r in ranges if (r.start is None or key >= r.start) and (r.end is None or key < r.end)]
        assert len(hits) == 1, key
    assert all(r.end is None or r.end <= high for r in ranges)


def test_even_split_rejects_bad_step() -> None:
    with pytest.raises(ValueError, match="step must be at least 1"):
        split_evenly(1, 10, 0)


def test_chunk_range_refuses_equal_borders() -> None:
    with pytest.raises(ValueError, match="Chunk start 5 must not equal chunk end 5"):
        ChunkRange(5, 5)
    assert str(ChunkRange(None, 5)) == "(-inf, 5)"
    assert str(ChunkRange(5, None)) == "[5, +inf)"


def test_distribution_factor() -> None:
    assert distribution_factor(1, 1000, 1000) == 1.0
    assert distribution_factor(1, 1000, 0) == float("inf")


# -- real server ---------------------------------------------------------------------------------

Make = Callable[..., SplitPlan]


@pytest.fixture
def split(mariadb: PrivateMariaDB, database: str) -> Make:
    """Create a table from DDL and rows, split it, check coverage, return the plan."""

    def make(
        ddl: str,
        rows: list[tuple[Any, ...]],
        chunk_size: int,
        chunk_key: str | None = None,
        analyze: bool = True,
    ) -> SplitPlan:
        mariadb.execute(ddl, database=database)
        name = ddl.split()[2]
        if rows:
            marks = ", ".join(["%s"] * len(rows[0]))
            with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
                cur.executemany(f"INSERT INTO {name} VALUES ({marks})", rows)
        if analyze:
            mariadb.execute(f"ANALYZE TABLE {name}", database=database)
        source = source_config(mariadb, database)
        with contextlib.closing(connect(source)) as conn:
            (table,) = discover(conn, [TableId(database, name)])
            plan = ChunkSplitter(conn, chunk_size).split(table, chunk_key)
        assert_covers(mariadb, database, name, plan)
        return plan

    return make


def assert_covers(server: PrivateMariaDB, database: str, table: str, plan: SplitPlan) -> None:
    """Every row lands in exactly one chunk."""
    everything = Counter(server.query(f"SELECT * FROM `{table}`", database=database))
    seen: Counter[tuple[Any, ...]] = Counter()
    for chunk in plan.chunks:
        where, params = chunk.where()
        seen.update(server.query(f"SELECT * FROM `{table}` WHERE {where}", params, database=database))
    assert seen == everything, f"missing {everything - seen}, extra {seen - everything}"


def chunk_sizes(server: PrivateMariaDB, database: str, table: str, plan: SplitPlan) -> list[int]:
    sizes = []
    for chunk in plan.chunks:
        where, params = chunk.where()
        sizes.append(
            server.query(f"SELECT COUNT(*) FROM `{table}` WHERE {where}", params, database=database)[0][0]
        )
    return sizes


def test_dense_int_key_is_split_evenly(split: Make) -> None:
    plan = split("CREATE TABLE t (id INT PRIMARY KEY, v INT)", [(i, i) for i in range(1, 101)], 10)
    assert plan.strategy == "even"
    assert len(plan.chunks) == 10
    assert plan.chunks[0].range == ChunkRange(None, 11)


def test_sparse_int_key_is_split_unevenly(split: Make, mariadb: PrivateMariaDB, database: str) -> None:
    rows = [(i * 100_000, i) for i in range(1, 51)]  # factor ≈ 100 000 per row: outside the bounds
    plan = split("CREATE TABLE t (id BIGINT PRIMARY KEY, v INT)", rows, 7)
    assert plan.strategy == "uneven"
    assert "outside" in plan.reason
    sizes = chunk_sizes(mariadb, database, "t", plan)
    assert sizes[:-1] == [7] * (len(sizes) - 1)  # exactly chunk_size rows each …
    assert 1 <= sizes[-1] <= 8  # … and the last one at most one more


def test_a_dense_stretch_among_sparse_keys_is_split_by_rows(
    split: Make, mariadb: PrivateMariaDB, database: str
) -> None:
    """Keys within the even split's bounds but not spread evenly (a dense first half, a sparse
    second): the even step would put the dense half in one chunk. The server's estimates find it,
    it is split at the server's borders, and the sparse ranges are joined: chunks of even rows."""
    rows = [(i, i) for i in range(1, 1001)] + [(1000 + i * 100, i) for i in range(1, 1001)]
    plan = split("CREATE TABLE t (id INT PRIMARY KEY, v INT)", rows, 40)
    assert plan.strategy == "even"
    assert "dense ranges split at the server's borders" in plan.reason
    sizes = sorted(chunk_sizes(mariadb, database, "t", plan))
    assert sizes[-1] <= 2 * sizes[len(sizes) // 2], sizes  # the first even range held 1,000 + 24 rows
    assert len(plan.chunks) <= 2 * len(rows) // 40


def test_bigint_unsigned_above_2_63(split: Make) -> None:
    rows = [(2**63 + i * 987_654_321_987, i) for i in range(40)] + [(U64_MAX, 99)]
    plan = split("CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY, v INT)", rows, 6)
    assert plan.strategy == "uneven"
    assert plan.max_key == U64_MAX
    assert len(plan.chunks) >= 7


def test_bigint_unsigned_dense_near_max_is_even(split: Make) -> None:
    rows = [(U64_MAX - i, i) for i in range(60)]
    plan = split("CREATE TABLE t (id BIGINT UNSIGNED PRIMARY KEY, v INT)", rows, 8)
    assert plan.strategy == "even"
    assert plan.chunks[-1].range.start is not None
    assert plan.chunks[-1].range.start <= U64_MAX


def test_decimal_key(split: Make) -> None:
    rows = [(f"{i * 3.25 - 40:.4f}", i) for i in range(70)]
    plan = split("CREATE TABLE t (k DECIMAL(20,4) PRIMARY KEY, v INT)", rows, 9)
    assert plan.strategy == "uneven"
    assert len(plan.chunks) > 7


def test_varchar_case_insensitive_collation(split: Make) -> None:
    # In binary order upper case sorts before lower case; under *_general_ci it does not. Borders
    # decided in Python would misplace rows; the splitter asks the server.
    words = ["apple", "Banana", "cherry", "Date", "elder", "FIG", "grape", "Honeydew", "iris", "Jujube"]
    words += [
        "kiwi",
        "Lemon",
        "mango",
        "Nectarine",
        "olive",
        "Papaya",
        "quince",
        "Raspberry",
        "ß-sharp",
        "Zest",
    ]
    ddl = "CREATE TABLE t (k VARCHAR(40) COLLATE utf8mb4_general_ci PRIMARY KEY, v INT)"
    plan = split(ddl, [(w, i) for i, w in enumerate(words)], 3)
    assert plan.strategy == "uneven"
    assert len(plan.chunks) >= 7


def test_case_insensitive_duplicates_in_a_chunk_key_take_the_equal_start_step(split: Make) -> None:
    # No primary key: 'a', 'A' and 'a ' are one value under utf8mb4_general_ci (PAD SPACE), so
    # the first chunk's end would equal its start; the splitter moves on to the next value.
    rows = [("a", 1), ("A", 2), ("a ", 3), ("a", 4), ("b", 5), ("B", 6), ("c", 7), ("d", 8), (None, 9)]
    ddl = "CREATE TABLE t (k VARCHAR(10) COLLATE utf8mb4_general_ci NULL, v INT, KEY (k))"
    plan = split(ddl, rows, 2, chunk_key="k")
    assert plan.strategy == "uneven"
    assert next(c.range.start for c in plan.chunks) is None


def test_datetime_key(split: Make) -> None:
    rows = [(f"2024-01-{1 + i // 24:02d} {i % 24:02d}:00:00.{i:06d}", i) for i in range(100)]
    plan = split("CREATE TABLE t (k DATETIME(6) PRIMARY KEY, v INT)", rows, 15)
    assert plan.strategy == "uneven"
    assert len(plan.chunks) >= 7


def test_binary_key(split: Make) -> None:
    import hashlib

    rows = [(hashlib.md5(str(i).encode()).digest(), i) for i in range(64)] + [
        (b"\x00" * 16, 64),
        (b"\xff" * 16, 65),
    ]
    plan = split("CREATE TABLE t (k BINARY(16) PRIMARY KEY, v INT)", rows, 10)
    assert plan.strategy == "uneven"
    assert plan.min_key == b"\x00" * 16


def test_composite_primary_key_splits_on_first_column(split: Make) -> None:
    rows = [(order, line, order * 10 + line) for order in range(1, 31) for line in range(1, (order % 4) + 2)]
    plan = split("CREATE TABLE t (o INT, line INT, v INT, PRIMARY KEY (o, line))", rows, 8)
    assert plan.key_column == "o"
    assert len(plan.chunks) > 3


def test_chunk_key_with_nulls_and_heavy_duplicates(split: Make) -> None:
    rows = [(None, i) for i in range(5)] + [(7, i) for i in range(20)] + [(k, 0) for k in range(8, 20)]
    plan = split("CREATE TABLE t (c INT NULL, v INT, KEY (c))", rows, 4, chunk_key="c")
    # 20 rows of c = 7 cannot be cut: one chunk holds them all, and the NULLs sit in the first.
    where, _ = plan.chunks[0].where()
    assert "IS NULL" in where


def test_empty_and_one_row_tables(split: Make) -> None:
    empty = split("CREATE TABLE e (id INT PRIMARY KEY)", [], 10)
    assert (empty.strategy, empty.chunks[0].range) == ("single", ChunkRange.all())
    one = split("CREATE TABLE o (id INT PRIMARY KEY)", [(42,)], 10)
    assert (one.strategy, len(one.chunks)) == ("single", 1)
    same = split("CREATE TABLE s (c VARCHAR(5), v INT)", [("x", 1), ("X", 2)], 1, chunk_key="c")
    assert same.strategy == "single"


def test_stale_statistics_fall_back_to_counting(split: Make) -> None:
    plan = split("CREATE TABLE t (id INT PRIMARY KEY)", [(i,) for i in range(1, 41)], 10, analyze=False)
    assert plan.estimated_rows > 0


def test_rows_per_chunk_follow_the_row_length() -> None:
    assert rows_per_chunk(8 << 20, 128) == 65536
    assert rows_per_chunk(8 << 20, 1000) == 8388
    assert rows_per_chunk(8 << 20, 100_000) == 1024  # wide rows: never fewer than 1,024 a chunk
    assert rows_per_chunk(8 << 20, 10) == 65536  # narrow rows: never more than 65,536
    assert rows_per_chunk(8 << 20, 0) == 8096  # no statistics yet: Flink CDC's default


def test_chunks_without_a_size_hold_the_bytes_asked_for(mariadb: PrivateMariaDB, database: str) -> None:
    """Unless ``chunk_size`` is given, a table's chunks hold about ``chunk_bytes`` at its average
    row length: two tables of 20,000 rows, one with rows four times as wide, and the same bytes
    asked of each: the wide one's chunks hold about a quarter of the rows."""
    for name, width in (("narrow", 50), ("wide", 200 * 4)):
        mariadb.execute(
            f"CREATE TABLE {name} (id INT PRIMARY KEY, v VARCHAR(1000))",
            f"INSERT INTO {name} SELECT seq, REPEAT('x', {width}) FROM seq_1_to_20000",
            f"ANALYZE TABLE {name}",
            database=database,
        )
    lengths = dict(
        mariadb.query(
            "SELECT TABLE_NAME, AVG_ROW_LENGTH FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s",
            (database,),
        )
    )
    with contextlib.closing(connect(source_config(mariadb, database))) as conn:
        tables = discover(conn, [TableId(database, "narrow"), TableId(database, "wide")])
        splitter = ChunkSplitter(conn, None, chunk_bytes=2_000_000)
        sizes = {}
        for table in tables:
            plan = splitter.split(table)
            assert_covers(mariadb, database, table.table.table, plan)
            sizes[table.table.table] = (splitter.chunk_size, len(plan.chunks))
    for name, (rows, chunks) in sizes.items():
        assert rows == 2_000_000 // int(lengths[name]), (name, lengths)
        assert chunks == pytest.approx(20_000 / rows, abs=1.5)
    assert sizes["wide"][0] < sizes["narrow"][0] / 3


def test_key_column_choice_errors(mariadb: PrivateMariaDB, database: str) -> None:
    mariadb.execute("CREATE TABLE nokey (a INT, b INT)", database=database)
    with contextlib.closing(connect(source_config(mariadb, database))) as conn:
        (table,) = discover(conn, [TableId(database, "nokey")])
    with pytest.raises(ChunkKeyError, match="no primary key and no chunk key"):
        choose_key_column(table, None)
    with pytest.raises(ChunkKeyError, match=r"has no such column .*columns: a, b"):
        choose_key_column(table, "nope")
    assert choose_key_column(table, "b").name == "b"


def test_a_chunk_id_reads_back_from_its_text() -> None:
    """One spelling wherever a chunk is stored or selected (``db.orders#17``); a ``#`` in a table's
    name stays in the name."""
    from binlake.source.chunks.splitter import ChunkId

    for chunk_id in (ChunkId(TableId("db", "orders"), 17), ChunkId(TableId("db", "odd#name"), 3)):
        assert ChunkId.parse(str(chunk_id)) == chunk_id
    assert str(ChunkId(TableId("db", "orders"), 17)) == "db.orders#17"
