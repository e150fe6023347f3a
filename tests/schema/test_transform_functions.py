"""Every transform function binlake evaluates, against the server: random values of each column type
(NULLs, extremes, negatives, zero divisors, non-ASCII text, leading and trailing spaces) evaluated by
MariaDB (`SELECT f(x) …`, one round trip) and by binlake's evaluator must be equal everywhere. Where
the server stops (an out-of-range result), binlake stops too."""

from __future__ import annotations

import contextlib
import datetime as dt
import random
from decimal import Decimal
from typing import Any

import pytest

from binlake.events import CreateTable, TableId
from binlake.schema.transform_eval import TransformInexactError
from binlake.schema.transforms import TransformError, TransformSpec, compile_transform
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from tests.schema.test_transforms import arrow_rows, same, source

TABLE = """CREATE TABLE f (
  id INT PRIMARY KEY, i INT, j INT, b BIGINT, k INT, u INT UNSIGNED, ub BIGINT UNSIGNED, t TINYINT,
  d DECIMAL(12,3), e DECIMAL(30,10), s VARCHAR(40) COLLATE utf8mb4_bin,
  g VARCHAR(20) CHARACTER SET ascii COLLATE ascii_general_ci, at DATETIME(6), ts TIMESTAMP(6) NULL,
  later DATETIME(6))"""

#: Each function binlake evaluates, on the columns it takes (binlake.schema.transform_rules).
FUNCTIONS = [
    "i % j", "MOD(i, j)", "i DIV j", "b % k", "MOD(b, 7)", "b DIV k", "u % j", "i % u", "u DIV 3",
    "ub % k", "ub DIV 1000", "t % 3", "d % 0.7", "MOD(d, j)", "d DIV 2", "d DIV j", "e % d", "e DIV d",
    "i % d", "NULLIF(i, j)", "NULLIF(d, 0)", "NULLIF(g, 'abc')",
    "TRIM(s)", "LTRIM(s)", "RTRIM(s)", "TRIM(g)",
    "SUBSTRING(s, 2)", "SUBSTRING(s, -3)", "SUBSTRING(s, 0)", "SUBSTRING(s, 2, 3)", "SUBSTRING(s, t, 2)",
    "SUBSTR(s, -2, 5)", "SUBSTRING(s, j % 7, t)", "LEFT(s, 3)", "RIGHT(s, 2)", "LEFT(s, t)", "RIGHT(s, t)",
    "HOUR(at)", "MINUTE(at)", "SECOND(at)", "HOUR(ts)", "MINUTE(ts)", "SECOND(ts)",
    "CEIL(d)", "CEILING(e)", "FLOOR(d)", "FLOOR(e)", "CEIL(i)", "FLOOR(ub)", "CEIL(t)",
    "ROUND(d)", "ROUND(d, 1)", "ROUND(d, 2)", "ROUND(d, 5)", "ROUND(d, -2)", "ROUND(e, 4)", "ROUND(e, -5)",
    "ROUND(i)", "ROUND(i, 2)", "ROUND(i, -2)", "ROUND(k, -1)", "ROUND(u, -3)", "ROUND(t, -1)",
    "TRUNCATE(d, 1)", "TRUNCATE(d, -1)", "TRUNCATE(e, 3)", "TRUNCATE(i, -3)", "TRUNCATE(k, -1)",
    "ROUND(b, -3)", "TRUNCATE(b, -4)", "CEIL(b)", "ROUND(ub, -2)",
    "DATE_FORMAT(at, '%Y-%m-%d %H:%i:%s.%f')", "DATE_FORMAT(at, '%y%c%e %k %l %h %I %p %r %T')",
    "DATE_FORMAT(at, '%a %b %D %j %M %W %w %% %q')", "DATE_FORMAT(ts, '%Y-%m')",
    "DATE_FORMAT(DATE(at), '%d/%m/%Y %H')",
    "TIMESTAMPDIFF(MICROSECOND, at, later)", "TIMESTAMPDIFF(SECOND, at, later)",
    "TIMESTAMPDIFF(MINUTE, later, at)", "TIMESTAMPDIFF(HOUR, at, later)", "TIMESTAMPDIFF(DAY, at, later)",
    "TIMESTAMPDIFF(WEEK, later, at)", "TIMESTAMPDIFF(MONTH, at, later)", "TIMESTAMPDIFF(MONTH, later, at)",
    "TIMESTAMPDIFF(QUARTER, at, later)", "TIMESTAMPDIFF(YEAR, later, at)",
    "TIMESTAMPDIFF(MONTH, DATE(at), later)", "TIMESTAMPDIFF(SECOND, ts, later)",
    "TIMESTAMPDIFF(MONTH, ts, later)",
    "TIMESTAMPADD(MONTH, t, at)", "TIMESTAMPADD(DAY, k, at)", "TIMESTAMPADD(SECOND, i, at)",
    "TIMESTAMPADD(MICROSECOND, b, at)", "TIMESTAMPADD(YEAR, i, at)", "TIMESTAMPADD(QUARTER, t, DATE(at))",
    "TIMESTAMPADD(HOUR, t, DATE(at))", "TIMESTAMPADD(WEEK, k, ts)", "DATE_ADD(at, INTERVAL 1 MONTH)",
    "DATE_SUB(DATE(at), INTERVAL 13 MONTH)", "DATE_ADD(later, INTERVAL t DAY)",
    "CAST(d AS SIGNED)", "CAST(e AS SIGNED)", "CONVERT(i, SIGNED)", "CAST(u AS UNSIGNED)",
    "CAST(ub AS UNSIGNED)", "CAST(i AS DECIMAL(5, 1))", "CAST(d AS DECIMAL(8, 1))",
    "CAST(e AS DECIMAL(12, 4))", "CAST(b AS DECIMAL)",
    "CAST(i AS CHAR)", "CAST(d AS CHAR)", "CAST(e AS CHAR)", "CAST(DATE(at) AS CHAR)", "CAST(s AS CHAR)",
    "CAST(at AS DATE)", "CAST(ts AS DATE)", "CAST(DATE(later) AS DATETIME)",
]  # fmt: skip

_TEXT = [
    "",
    " ",
    "a",
    "ab c",
    "  lead",
    "trail  ",
    " both ",
    "äöü",
    "日本語テキスト",
    "x😀y",
    "Ab\tC",
    "null",
]


def _pick(rng: random.Random, nulls: float, *choices: Any) -> Any:
    return None if rng.random() < nulls else rng.choice(choices)


def _row(rng: random.Random, n: int) -> tuple[Any, ...]:
    def whole(low: int, high: int, *extremes: int) -> int | None:
        return _pick(rng, 0.1, *extremes, *(rng.randint(low, high) for _ in range(6)))

    day = dt.datetime(1971, 1, 1) + dt.timedelta(
        seconds=rng.randint(0, 2_000_000_000), microseconds=rng.randint(0, 999_999)
    )
    return (
        n,
        whole(-(2**31), 2**31 - 1, -(2**31), 2**31 - 1, 0, -1, 1),
        whole(-50, 50, 0, -1, 1, 2**31 - 1, -(2**31)),  # divisors: zero and both signs
        whole(-(2**63), 2**63 - 1, -(2**63), 2**63 - 1, 0),
        whole(-1000, 1000, 0, 2, -3, 7),  # divisors of b: never -1 (the server stops on MIN DIV -1)
        whole(0, 2**32 - 1, 0, 2**32 - 1),
        whole(0, 2**63 - 1, 0, 2**63 - 1),
        whole(-128, 127, -128, 127, 0, 1, -1),
        _pick(rng, 0.1, Decimal("0"), Decimal("-999999999.999"), Decimal("999999999.999"),
              *(Decimal(rng.randint(-10**12 + 1, 10**12 - 1)).scaleb(-3) for _ in range(6))),
        _pick(rng, 0.1, Decimal("0"), *(Decimal(rng.randint(-10**16, 10**16)).scaleb(-10) for _ in range(6))),
        _pick(rng, 0.1, *_TEXT, "".join(rng.choice("aé 日😀b") for _ in range(rng.randint(0, 12)))),
        _pick(rng, 0.1, "abc", "ABC", "abc ", " abc", "x", ""),
        _pick(rng, 0.1, day),
        _pick(rng, 0.1, day.replace(year=min(day.year, 2037))),
        # near `at` (same day and time of the month, a second either side, month ends) or far
        _pick(rng, 0.1, day + dt.timedelta(days=rng.choice((0, 31, 61, 365, -30, -366))),
              day + dt.timedelta(seconds=rng.choice((1, -1, 59, 3600))), day.replace(day=min(day.day, 28)),
              dt.datetime(1971, 1, 1) + dt.timedelta(seconds=rng.randint(0, 2_000_000_000))),
    )  # fmt: skip


@pytest.fixture
def table(mariadb: PrivateMariaDB, database: str) -> CreateTable:
    rng = random.Random(20261126)
    rows = [_row(rng, n) for n in range(1, 301)]
    mariadb.execute(TABLE, database=database)
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.executemany(f"INSERT INTO f VALUES ({', '.join(['%s'] * 15)})", rows)
        conn.commit()
        return discover(conn, [TableId(database, "f")])[0]


def test_each_function_equals_the_servers_on_random_values(
    mariadb: PrivateMariaDB, table: CreateTable
) -> None:
    rows = arrow_rows(mariadb, table)
    projection = ", ".join(f"{e} AS c{i}" for i, e in enumerate(FUNCTIONS))
    ours = compile_transform(TransformSpec(f"id, {projection}"), table).project(rows).to_pylist()
    theirs = source(mariadb, table, f"SELECT id, {projection} FROM t ORDER BY id")
    differing: dict[str, list[tuple[Any, Any, Any]]] = {}
    for row, expected in zip(ours, theirs, strict=True):
        for i, function in enumerate(FUNCTIONS):
            if not same(row[f"c{i}"], expected[i + 1]):
                differing.setdefault(function, []).append((row["id"], row[f"c{i}"], expected[i + 1]))
    assert not differing, {f: found[:3] for f, found in differing.items()}


@pytest.mark.parametrize(
    ("expression", "values"),
    [
        ("b DIV k", "(1, -9223372036854775808, -1)"),  # past BIGINT's maximum
        ("ub DIV k", "(1, 7, -2)"),  # a negative result of an unsigned operand
    ],
)
def test_where_the_server_stops_binlake_stops(
    mariadb: PrivateMariaDB, database: str, expression: str, values: str
) -> None:
    mariadb.execute(
        "CREATE TABLE o (id INT PRIMARY KEY, b BIGINT, ub BIGINT UNSIGNED, k INT)", database=database
    )
    column = "b" if expression.startswith("b ") else "ub"
    mariadb.execute(f"INSERT INTO o (id, {column}, k) VALUES {values}", database=database)
    with contextlib.closing(mariadb.admin_connection()) as conn:
        schema = discover(conn, [TableId(database, "o")])[0]
    with pytest.raises(Exception, match="out of range"):
        source(mariadb, schema, f"SELECT {expression} FROM t")
    with pytest.raises(TransformInexactError, match="out of the range"):
        compile_transform(TransformSpec(f"id, {expression} AS q"), schema).project(
            arrow_rows(mariadb, schema)
        )


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("ROUND(d, j)", "not a whole-number constant"),  # the server types it by the digits' value
        ("ROUND(1.5e0)", "floating-point"),  # a DOUBLE's binary value decides
        ("FLOOR(s)", "not a number"),
        ("DATE_FORMAT(at, '%Y week %U')", "week numbers"),  # MySQL's own week rules
        ("DATE_FORMAT(at, s)", "not a constant"),
        ("DATE_FORMAT(i, '%Y')", "not a DATE"),
        ("TIMESTAMPDIFF(SECOND, i, at)", "not a DATE"),
        ("TIMESTAMPADD(DAY, d, at)", "not a whole number"),  # the server rounds a DECIMAL amount
        ("CAST(i AS UNSIGNED)", "does not reproduce"),  # a negative value wraps past BIGINT's range
        ("CAST(s AS SIGNED)", "does not reproduce"),  # the server's reading of text as a number
        ("CAST(at AS CHAR)", "does not reproduce"),
    ],
)
def test_what_binlake_cannot_reproduce_is_refused(table: CreateTable, expression: str, reason: str) -> None:
    with pytest.raises(TransformError, match=reason):
        compile_transform(TransformSpec(f"id, {expression} AS r"), table)


@pytest.mark.parametrize(
    ("expression", "year_zero"),
    [
        ("TIMESTAMPADD(YEAR, -2024, at)", "2024-05-17 08:00:00"),
        ("TIMESTAMPADD(MONTH, -1, DATE(at))", "0001-01-15 00:00:00"),
        ("DATE_SUB(at, INTERVAL 1 YEAR)", "0001-05-17 08:00:00"),
    ],
)
def test_months_back_into_year_zero_stop_where_days_are_null(
    mariadb: PrivateMariaDB, database: str, expression: str, year_zero: str
) -> None:
    """Months taken into year 0: the server returns the date (`0000-…`), which no date type here
    holds, so binlake stops; days or seconds taken past year 1 are NULL on both sides."""
    mariadb.execute("CREATE TABLE y0 (id INT PRIMARY KEY, at DATETIME(6))", database=database)
    days_back = "TIMESTAMPADD(DAY, -1, at)"
    mariadb.execute(
        f"INSERT INTO y0 VALUES (1, '{year_zero}'), (2, '0001-01-01 00:00:00')", database=database
    )
    with contextlib.closing(mariadb.admin_connection()) as conn:
        schema = discover(conn, [TableId(database, "y0")])[0]
    sql = f"SELECT CAST({expression} AS CHAR), CAST({days_back} AS CHAR) FROM t ORDER BY id"
    server = source(mariadb, schema, sql)
    assert str(server[0][0]).startswith("0000-")  # the server's year 0
    assert server[1][1] is None  # a day before 0001-01-01: NULL
    rows = arrow_rows(mariadb, schema)
    with pytest.raises(TransformInexactError, match=r"year 0 .*Fix: filter such rows out"):
        compile_transform(TransformSpec(f"id, {expression} AS r"), schema).project(rows.slice(0, 1))
    nulls = compile_transform(TransformSpec(f"id, {days_back} AS r"), schema).project(rows.slice(1, 1))
    assert nulls.column("r").to_pylist() == [None]
