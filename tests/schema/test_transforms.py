"""Transforms: every expression binlake accepts evaluates on Arrow to what MariaDB computes for the
same rows (the server is the oracle), values it cannot reproduce stop it, and every expression it
cannot evaluate exactly is refused with the expression and the fix."""

from __future__ import annotations

import contextlib
import datetime as dt
from typing import Any

import pyarrow as pa
import pytest

from binlake.events import Column, CreateTable, TableId
from binlake.schema.transform_eval import TransformInexactError
from binlake.schema.transforms import (
    EVENT_TYPE,
    OP_TS,
    POSITION,
    TransformError,
    TransformSpec,
    compile_transform,
)
from binlake.schema.type_mapping import RowConverter, arrow_type
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB

TABLE = """CREATE TABLE t (
  id INT PRIMARY KEY, name VARCHAR(20) COLLATE utf8mb4_general_ci, code VARCHAR(10) COLLATE utf8mb4_bin,
  amount DECIMAL(10,2), qty INT, price DOUBLE, flag TINYINT(1), u INT UNSIGNED, d DATE, at DATETIME(6),
  ts TIMESTAMP(6) NULL)"""
ROWS = """INSERT INTO t VALUES
  (1, 'Alice', 'a1', 10.50, 3, 1.5, 1, 7, '2024-01-31', '2024-01-31 23:59:59.5', '2024-02-01 00:00:00'),
  (2, 'BOB ', 'B2 ', -2.25, -4, -0.25, 0, 0, '2023-12-01', '2023-12-01 00:00:00', NULL),
  (3, 'test', 'test', 0.00, 0, 0, NULL, 1, NULL, NULL, '2030-06-15 12:00:00.000001'),
  (4, NULL, NULL, NULL, NULL, NULL, 1, NULL, '2024-02-29', '2024-02-29 12:00:00', NULL),
  (5, 'TEST', 'Test', 99999999.99, 2147483647, 1e300, 0, 4294967295, '1999-12-31', '1999-12-31 23:59:59',
   NULL)"""

#: Expressions of a projection, each compared value by value with the server's result.
EXPRESSIONS = [
    "amount * 100", "amount + qty", "qty - 1", "qty * qty", "-amount", "amount - amount * 2", "price * 2",
    "price + amount", "ABS(amount)", "ABS(qty)", "u + 1", "flag + 1",
    "UPPER(name)", "LOWER(code)", "CONCAT(name, '-', code)", "CHAR_LENGTH(name)",
    "COALESCE(name, code, 'none')", "IFNULL(amount, 0)", "IF(qty > 0, 'pos', 'other')",
    "CASE WHEN amount > 100 THEN 'big' WHEN amount > 0 THEN 'small' ELSE NULL END",
    "DATE(at)", "YEAR(d)", "MONTH(at)", "DAY(ts)", "DATE(ts)",
    "name = 'alice'", "name = 'bob'", "name <> 'test'", "code = 'b2'", "code = 'B2'", "name IN ('test', 'x')",
    "code IN ('Test', NULL)", "qty BETWEEN -4 AND 2", "amount > 0 AND qty > 0", "amount > 0 OR name IS NULL",
    "NOT (qty > 0)", "flag", "NOT flag", "flag XOR (qty > 0)", "d > '2024-01-01'",
    "at <= '2024-01-31 23:59:59.5'", "d IS NULL", "name <=> NULL", "qty = 3.0", "price > 1", "amount = 10.5",
]  # fmt: skip


@pytest.fixture
def table(mariadb: PrivateMariaDB, database: str) -> CreateTable:
    mariadb.execute(TABLE, ROWS, database=database)
    with contextlib.closing(mariadb.admin_connection()) as conn:
        return discover(conn, [TableId(database, "t")])[0]


def source(mariadb: PrivateMariaDB, schema: CreateTable, sql: str) -> list[tuple[Any, ...]]:
    with contextlib.closing(mariadb.admin_connection()) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")  # binlake reads TIMESTAMP in UTC
        cur.execute(sql.replace("FROM t", f"FROM {schema.table.quoted()}"))
        return list(cur.fetchall())


def arrow_rows(mariadb: PrivateMariaDB, schema: CreateTable) -> pa.Table:
    converter = RowConverter(schema)
    rows = source(mariadb, schema, "SELECT * FROM t ORDER BY id")
    return pa.Table.from_batches([converter.batch(converter.select_columns(rows))])


def same(ours: Any, theirs: Any) -> bool:
    if isinstance(ours, bool):
        return theirs is not None and int(ours) == int(theirs)
    if isinstance(ours, dt.datetime) and ours.tzinfo is not None:
        ours = ours.replace(tzinfo=None)
    if isinstance(theirs, float) or isinstance(ours, float):
        return ours == theirs or (ours is not None and theirs is not None and float(ours) == float(theirs))
    return bool(ours == theirs)


def test_every_accepted_expression_equals_the_servers(mariadb: PrivateMariaDB, table: CreateTable) -> None:
    rows = arrow_rows(mariadb, table)
    projection = ", ".join(f"{e} AS c{i}" for i, e in enumerate(EXPRESSIONS))
    transform = compile_transform(TransformSpec(f"id, {projection}"), table)
    ours = transform.project(rows).to_pylist()
    theirs = source(mariadb, table, f"SELECT id, {projection} FROM t ORDER BY id")
    for row, expected in zip(ours, theirs, strict=True):
        for i, expression in enumerate(EXPRESSIONS):
            got = row[f"c{i}"]
            assert same(got, expected[i + 1]), (expression, row["id"], got, expected[i + 1])
    # The sink's columns are typed from the expressions: what the evaluation produced fits them.
    for column, name in zip(transform.sink.columns[1:], ours[0], strict=False):
        assert arrow_type(column) is not None, name
    assert transform.sink.primary_key == ("id",)


def test_a_filter_keeps_the_rows_the_server_keeps(mariadb: PrivateMariaDB, table: CreateTable) -> None:
    rows = arrow_rows(mariadb, table)
    for condition in ["name <> 'test' AND amount > 0", "amount > 0", "name IS NULL OR code = 'test'",
                      "d >= '2024-01-01' OR qty < 0", "NOT (name = 'test')", "flag", "qty"]:  # fmt: skip
        transform = compile_transform(TransformSpec("id, code AS c", condition), table)
        kept = rows.filter(transform.keep(rows)).column("id").to_pylist()
        assert kept == [
            r[0] for r in source(mariadb, table, f"SELECT id FROM t WHERE {condition} ORDER BY id")
        ], condition
    projected = compile_transform(TransformSpec("id, code AS c"), table)
    assert projected.project(rows).column_names == ["id", "c"]
    assert [c.name for c in projected.sink.columns] == ["id", "c"]
    assert projected.sink.column("c").collation == "utf8mb4_bin"  # a kept column keeps its definition


def test_metadata_columns() -> None:
    schema = CreateTable(TableId("shop", "t"), (Column("id", "int", "int", False),), ("id",))
    transform = compile_transform(TransformSpec(f"id, __database__ AS db, __table__, {OP_TS} AS at"), schema)
    rows = pa.table({"id": pa.array([1, 2], pa.int32())})
    when = pa.array([dt.datetime(2026, 1, 1, tzinfo=dt.UTC), None], pa.timestamp("us", "UTC"))
    assert transform.project(rows, {OP_TS: when}).to_pylist() == [
        {"id": 1, "db": "shop", "__table__": "t", "at": dt.datetime(2026, 1, 1, tzinfo=dt.UTC)},
        {"id": 2, "db": "shop", "__table__": "t", "at": None},
    ]
    # A change's position, as MySQL names binlog files; an update the filter drops is a delete.
    changes = compile_transform(TransformSpec(f"id, {POSITION} AS pos", "id > 1"), schema)
    rows3 = pa.table({"id": pa.array([1, 2, 3], pa.int32())})
    at = pa.array([(12 << 32) | 4, (7 << 32) | 123456, None], pa.int64())
    kept, dropped = changes.upserts(rows3, pa.array([0, 0, 0]), at, "mysql-bin")
    assert kept.to_pylist() == [{"id": 2, "pos": "mysql-bin.000007:123456"}, {"id": 3, "pos": None}]
    assert dropped.to_pylist() == [{"id": 1}]
    # The last change's kind, as Flink CDC's `__data_event_type__`: rows a snapshot read are `+I`.
    kinds = compile_transform(TransformSpec(f"id, {EVENT_TYPE} AS kind", "id > 1"), schema)
    kept, dropped = kinds.upserts(rows3, ops=pa.array(["update", "insert", "update"]))
    assert kept.to_pylist() == [{"id": 2, "kind": "+I"}, {"id": 3, "kind": "+U"}]
    assert dropped.to_pylist() == [{"id": 1}]
    assert kinds.project(rows3).column("kind").to_pylist() == ["+I"] * 3
    keyless = CreateTable(TableId("shop", "t"), (Column("id", "int", "int", False),), ())
    with pytest.raises(TransformError, match="need a primary key"):
        compile_transform(TransformSpec(f"id, {EVENT_TYPE} AS kind"), keyless)


@pytest.mark.parametrize(
    ("projection", "condition", "message"),
    [
        ("id, nope AS x", None, "`nope` is not a column"),
        ("id, RAND() AS r", None, "not deterministic"),
        ("id, NOW() AS n", None, "not deterministic"),
        ("id, CURRENT_TIMESTAMP AS n", None, "not deterministic"),
        ("id, UUID() AS n", None, "not deterministic"),
        ("id, SUM(qty) AS s", None, "one row at a time"),
        ("id, (SELECT 1) AS s", None, "one row at a time"),
        ("id, amount / 2 AS half", None, "division"),
        ("id, amount / 2 AS half", None, "rounds by the server"),
        ("id, name % 2 AS odd", None, "of integers and DECIMALs"),
        ("id, SUBSTRING(name, 1.5) AS s", None, "not an integer"),
        ("id, TRIM(BOTH 'x' FROM name) AS s", None, "only spaces"),
        ("id, LENGTH(name) AS n", None, "use CHAR_LENGTH"),
        ("id, UPPER(qty) AS n", None, "not text"),
        ("id, name + 1 AS n", None, "not a number"),
        ("id, SOUNDEX(name) AS s", None, "does not evaluate it"),
        ("name, qty", None, "primary key"),
        ("id, name, code AS name", None, "more than once"),
        ("id, qty + 1", None, "needs a name"),
        ("id", "name > 'm'", "ordered by its collation"),
        ("id", "name BETWEEN 'a' AND 'm'", "ordered by its collation"),
        ("id", "name LIKE 'a%'", "does not evaluate it"),
        ("id", "name = qty", "compares text with int"),
        ("id", "name = code", "two collations"),
        ("id", "name", "not a condition"),
        ("id", "qty IN (SELECT 1)", "one row at a time"),
        ("id, amount * amount * amount * amount * amount AS big", None, "wider than"),
        ("id, (qty", None, "cannot parse"),
    ],
)
def test_expressions_binlake_cannot_evaluate_exactly_are_refused(
    projection: str, condition: str | None, message: str
) -> None:
    schema = CreateTable(
        TableId("db", "t"),
        (
            Column("id", "int", "int", False),
            Column("name", "varchar", "varchar(20)", collation="utf8mb4_general_ci"),
            Column("code", "varchar", "varchar(10)", collation="utf8mb4_bin"),
            Column("qty", "int", "int"),
            Column("amount", "decimal", "decimal(10,2)", precision=10, scale=2),
        ),
        ("id",),
    )
    with pytest.raises(TransformError, match=message) as refused:
        compile_transform(TransformSpec(projection, condition, "drop test rows"), schema)
    assert "transform of db.t (drop test rows)" in str(refused.value)
    assert "Fix:" in str(refused.value)


def test_values_binlake_cannot_reproduce_stop_it() -> None:
    schema = CreateTable(
        TableId("db", "t"),
        (
            Column("id", "bigint", "bigint", False),
            Column("name", "varchar", "varchar(20)", collation="utf8mb4_general_ci"),
        ),
        ("id",),
    )
    accents = pa.table({"id": pa.array([1, 2], pa.int64()), "name": ["plain", "Ärger"]})
    for spec in [TransformSpec("id", "name = 'ärger'"), TransformSpec("id, UPPER(name) AS u")]:
        transform = compile_transform(spec, schema)
        with pytest.raises(TransformInexactError, match="outside printable ASCII"):
            transform.keep(accents) if spec.filter else transform.project(accents)
    big = pa.table({"id": pa.array([2**62, 1], pa.int64()), "name": ["a", "b"]})
    with pytest.raises(TransformInexactError, match="overflow"):
        compile_transform(TransformSpec("id, id * 4 AS x"), schema).project(big)
    same_rows = compile_transform(TransformSpec("id, id * 1 AS x"), schema).project(big)
    assert same_rows.column("x").to_pylist() == [2**62, 1]
    # In the stream, the stop names the row and its change's binlog position (found among many).
    many = pa.table({"id": pa.array([*range(1, 1000), 2**62, 1000], pa.int64()), "name": ["a"] * 1001})
    at = pa.array([(3 << 32) | (4 + i) for i in range(1001)], pa.int64())
    transform = compile_transform(TransformSpec("id, id * 4 AS x"), schema)
    with pytest.raises(TransformInexactError) as stopped:
        transform.upserts(many, pa.array([0] * 1001), at, "mysql-bin")
    assert f"The row: key {{'id': {2**62}}}, changed at binlog position mysql-bin.000003:1003. Fix:" in str(
        stopped.value
    )


def test_a_shadow_table_goes_through_its_tables_rule(tmp_path: Any) -> None:
    from binlake.config import PipelineConfig
    from binlake.schema.table_rules import transform_rule

    config = PipelineConfig.model_validate(
        {
            "pipeline": {"name": "p", "work_dir": str(tmp_path)},
            "source": {"hostname": "h", "username": "u", "password": "p", "tables": [r"shop\..*"]},
            "transform": [{"source_table": r"shop\.orders", "filter": "total > 0"}],
        }
    )
    rule = transform_rule(config, TableId.parse("shop.orders"))
    assert rule is not None
    # gh-ost's and pt-osc's shadow tables become `orders` at the cut-over: the same rule, from the start.
    assert transform_rule(config, TableId.parse("shop._orders_gho")) == rule
    assert transform_rule(config, TableId.parse("shop._orders_new")) == rule
    assert transform_rule(config, TableId.parse("shop._orders_del")) == rule
    assert transform_rule(config, TableId.parse("shop.customers")) is None
    assert transform_rule(config, TableId.parse("shop._customers_gho")) is None
