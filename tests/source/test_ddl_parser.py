"""DDL parsing: every statement form into schema changes, checked against the server itself.

The oracle: run the statement on MariaDB and read the table back from information_schema
(discovery); the schema before, evolved by the parsed changes, must equal it.
"""

from __future__ import annotations

import contextlib
from dataclasses import fields

import pytest

from binlake.events import (
    AddColumn,
    AlterColumnType,
    CreateTable,
    DropColumn,
    DropTable,
    RenameColumn,
    RenameTable,
    SchemaChange,
    TableId,
    TruncateTable,
)
from binlake.schema.history import evolve
from binlake.source.connection import connect
from binlake.source.ddl_parser import UnparsedDdlError, parse_ddl
from binlake.source.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import source_config

T = TableId("db", "t")


def _none(_: TableId) -> CreateTable | None:
    return None


def _kinds(changes: list[SchemaChange]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for c in changes:
        if isinstance(c, AddColumn):
            out.append(("add", str(c.table), c.column.name, c.column.column_type, c.position, c.after or ""))
        elif isinstance(c, DropColumn):
            out.append(("drop", str(c.table), c.name))
        elif isinstance(c, RenameColumn):
            out.append(("rename", str(c.table), c.old_name, c.new_name))
        elif isinstance(c, AlterColumnType):
            out.append(("type", str(c.table), c.column.name, c.column.column_type))
        elif isinstance(c, RenameTable):
            out.append(("rename-table", str(c.table), str(c.new_table)))
        elif isinstance(c, DropTable):
            out.append(("drop-table", str(c.table)))
        elif isinstance(c, TruncateTable):
            out.append(("truncate", str(c.table)))
        else:
            assert isinstance(c, CreateTable)
            out.append(("create", str(c.table), *c.column_names, "pk", *c.primary_key))
    return out


@pytest.mark.parametrize(
    ("statement", "expected"),
    [
        (
            "ALTER TABLE `db`.`t` ADD COLUMN c INT NOT NULL DEFAULT 3 AFTER b, ADD d VARCHAR(20) FIRST, "
            "DROP COLUMN e, DROP f",
            [("add", "db.t", "c", "int(11)", "after", "b"), ("add", "db.t", "d", "varchar(20)", "first", ""),
             ("drop", "db.t", "e"), ("drop", "db.t", "f")],
        ),
        (
            "ALTER TABLE t ADD COLUMN (a INT UNSIGNED, b DECIMAL(10,2)), ADD (c ENUM('x','y''z'))",
            [("add", "db.t", "a", "int(10) unsigned", "last", ""),
             ("add", "db.t", "b", "decimal(10,2)", "last", ""),
             ("add", "db.t", "c", "enum('x','y''z')", "last", "")],
        ),
        ("ALTER TABLE t CHANGE COLUMN old new BIGINT NOT NULL",
         [("rename", "db.t", "old", "new"), ("type", "db.t", "new", "bigint(20)")]),
        ("ALTER TABLE t CHANGE old new TEXT",
         [("rename", "db.t", "old", "new"), ("type", "db.t", "new", "text")]),
        ("ALTER TABLE t MODIFY COLUMN x DATETIME(6) NULL", [("type", "db.t", "x", "datetime(6)")]),
        ("ALTER TABLE t MODIFY x POINT", [("type", "db.t", "x", "point")]),
        ("ALTER TABLE t RENAME COLUMN a TO b", [("rename", "db.t", "a", "b")]),
        ("ALTER TABLE t RENAME TO other.u", [("rename-table", "db.t", "other.u")]),
        ("ALTER TABLE t RENAME u", [("rename-table", "db.t", "db.u")]),
        ("/* why */ ALTER TABLE t ADD c INT, ALGORITHM=INPLACE, LOCK=NONE",
         [("add", "db.t", "c", "int(11)", "last", "")]),
        ("ALTER TABLE t ADD COLUMN IF NOT EXISTS c BOOL", [("add", "db.t", "c", "tinyint(1)", "last", "")]),
        ("CREATE TABLE IF NOT EXISTS t2 (id INT PRIMARY KEY AUTO_INCREMENT, v VARCHAR(10), KEY k (v)) "
         "ENGINE=InnoDB",
         [("create", "db.t2", "id", "v", "pk", "id")]),
        ("CREATE TABLE `x`.`t3` (a INT, `b c` INT, PRIMARY KEY (a, `b c`))",
         [("create", "x.t3", "a", "b c", "pk", "a", "b c")]),
        ("CREATE OR REPLACE TABLE t4 (a INT)", [("create", "db.t4", "a", "pk")]),
        ("DROP TABLE IF EXISTS t, db2.u", [("drop-table", "db.t"), ("drop-table", "db2.u")]),
        ("TRUNCATE TABLE t", [("truncate", "db.t")]),
        ("TRUNCATE db2.t", [("truncate", "db2.t")]),
        ("RENAME TABLE a TO b, db2.c TO `db2`.`d`",
         [("rename-table", "db.a", "db.b"), ("rename-table", "db2.c", "db2.d")]),
    ],
)  # fmt: skip
def test_statement_forms(statement: str, expected: list[tuple[str, ...]]) -> None:
    assert _kinds(parse_ddl(statement, "db", _none)) == expected


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE INDEX i ON t (a)",
        "DROP INDEX i ON t",
        "CREATE VIEW v AS SELECT 1",
        "DROP VIEW v",
        "GRANT SELECT ON *.* TO u",
        "CREATE USER u IDENTIFIED BY 'secret'",
        "ANALYZE TABLE t",
        "OPTIMIZE TABLE t",
        "CREATE TEMPORARY TABLE tmp (a INT)",
        "DROP TEMPORARY TABLE tmp",
        "ALTER TABLE t ADD INDEX i (a), DROP INDEX j",
        "ALTER TABLE t ENGINE=InnoDB",
        "ALTER TABLE t ALTER COLUMN a SET DEFAULT 1",
        "ALTER TABLE t COMMENT 'x'",
        "FLUSH TABLES",
        "CREATE DATABASE d",
        "SAVEPOINT s",
    ],
)
def test_statements_that_change_no_table_are_ignored(statement: str) -> None:
    assert parse_ddl(statement, "db", _none) == []


@pytest.mark.parametrize(
    ("statement", "reason"),
    [
        ("ALTER TABLE t CONVERT TO CHARACTER SET latin1", "does not support"),
        ("CREATE TABLE t AS SELECT 1 AS a", "AS SELECT"),
        ("CREATE TABLE t LIKE unknown", "does not know"),
        ("ALTER TABLE t ADD PRIMARY KEY (a)", "primary key"),
        ("ALTER TABLE t ADD c SOMETYPE", "."),
    ],
)
def test_table_statements_it_cannot_read_are_reported(statement: str, reason: str) -> None:
    with pytest.raises(UnparsedDdlError, match=reason):
        parse_ddl(statement, "db", _none)


def test_create_like_copies_the_known_schema() -> None:
    source = CreateTable(TableId("db", "src"), (), ("id",))
    (created,) = parse_ddl("CREATE TABLE t LIKE src", "db", lambda t: source if t == source.table else None)
    assert created == CreateTable(T, (), ("id",))


# -- against the server --------------------------------------------------------------------------

BASE = (
    "CREATE TABLE t (id INT PRIMARY KEY, a VARCHAR(10) CHARACTER SET latin1, b INT UNSIGNED NOT NULL, "
    "c TEXT, d DECIMAL(8,2), e DATETIME(3)) DEFAULT CHARSET=utf8mb4"
)
ORACLE = [
    "ALTER TABLE t ADD COLUMN f INT NOT NULL DEFAULT 3 AFTER a, ADD g VARCHAR(20) FIRST, DROP COLUMN c",
    "ALTER TABLE t ADD COLUMN (h BIGINT UNSIGNED, i DECIMAL(30,10), j ENUM('x','y''z'), k SET('p','q'))",
    "ALTER TABLE t CHANGE COLUMN b bb BIGINT NOT NULL",
    "ALTER TABLE t CHANGE a a2 VARCHAR(40)",  # latin1 → the table's utf8mb4: the new definition names none
    "ALTER TABLE t MODIFY COLUMN e DATETIME(6) NULL, MODIFY d DECIMAL(12,4) UNSIGNED",
    "ALTER TABLE t RENAME COLUMN d TO dd",
    "ALTER TABLE t ADD l TIMESTAMP(3) NULL, ADD m TIME(2), ADD n BIT(5), ADD o YEAR, ADD p BOOL, ADD q FLOAT",
    "ALTER TABLE t ADD r CHAR(3) CHARACTER SET latin1 COLLATE latin1_bin, ADD s BINARY(4), "
    "ADD u VARBINARY(9)",
    "ALTER TABLE t ADD v MEDIUMTEXT, ADD w LONGBLOB, ADD x JSON, ADD y POINT, ADD z DOUBLE, "
    "ADD zz VARCHAR(5) BINARY",
    "ALTER TABLE t ADD t1 TINYINT(1), ADD t2 SMALLINT UNSIGNED, ADD t3 MEDIUMINT, ADD t4 DECIMAL, "
    "ADD t5 NUMERIC(5)",
]


def _discover(mariadb: PrivateMariaDB, database: str, table: str) -> CreateTable:
    with contextlib.closing(connect(source_config(mariadb, database))) as conn:
        (schema,) = discover(conn, [TableId(database, table)])
    return schema


def _comparable(schema: CreateTable | None) -> object:
    assert schema is not None
    skip = {"default", "auto_increment"}  # defaults and auto-increment never reach the sink
    return (
        str(schema.table),
        [{f.name: getattr(c, f.name) for f in fields(c) if f.name not in skip} for c in schema.columns],
        schema.primary_key,
    )


def _difference(got: object, want: object) -> str:
    """Which fields of which columns differ (pytest's diff of long lists hides them)."""
    lines = []
    for g, w in zip(got[1], want[1], strict=False):  # type: ignore[index]
        diff = {k: (g.get(k), w.get(k)) for k in w if g.get(k) != w.get(k)}
        if diff:
            lines.append(f"{w['name']}: {diff}")
    names = ([c["name"] for c in got[1]], [c["name"] for c in want[1]])  # type: ignore[index]
    return "; ".join(lines) or f"columns/keys differ: {names}, {got[2]} vs {want[2]}"  # type: ignore[index]


@pytest.mark.parametrize("statement", ORACLE)
def test_parsed_changes_match_what_the_server_did(
    mariadb: PrivateMariaDB, database: str, statement: str
) -> None:
    mariadb.execute(BASE, database=database)
    before = _discover(mariadb, database, "t")
    mariadb.execute(statement, database=database)
    after = _discover(mariadb, database, "t")
    table = TableId(database, "t")
    schema: CreateTable | None = before
    for change in parse_ddl(statement, database, lambda t: before if t == table else None):
        schema = evolve(table, schema, change)
    got, want = _comparable(schema), _comparable(after)
    assert got[1:] == want[1:], _difference(got, want)  # type: ignore[index]


def test_created_tables_match_what_the_server_did(mariadb: PrivateMariaDB, database: str) -> None:
    statement = (
        f"CREATE TABLE `{database}`.`n` (id BIGINT UNSIGNED AUTO_INCREMENT, k VARCHAR(8) NOT NULL, "
        "v DECIMAL(10,3), s ENUM('a','b') CHARACTER SET latin1, PRIMARY KEY (id, k)) DEFAULT CHARSET=latin1"
    )
    (created,) = parse_ddl(statement, "elsewhere", _none)
    mariadb.execute(statement, database=database)
    got, want = _comparable(created), _comparable(_discover(mariadb, database, "n"))
    assert got == want, _difference(got, want)
