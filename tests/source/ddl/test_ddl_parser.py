"""DDL parsing: every statement form into schema changes, checked against the server itself.

The oracle: run the statement on MariaDB and read the table back from information_schema
(discovery); the schema before, evolved by the parsed changes, must equal it.
"""

from __future__ import annotations

import contextlib
from dataclasses import fields, replace

import pytest

from binlake.events import (
    AddColumn,
    AlterColumnDefault,
    AlterColumnType,
    AlterPrimaryKey,
    AlterTableCollation,
    Column,
    CreateTable,
    DropColumn,
    DropTable,
    PartitionRowsChanged,
    RenameColumn,
    RenameTable,
    SchemaChange,
    TableId,
    TruncateTable,
)
from binlake.schema.history import evolve
from binlake.source.ddl.parser import Charsets, UnparsedDdlError, parse_ddl
from binlake.source.server.connection import connect
from binlake.source.server.discovery import discover
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import source_config

T = TableId("db", "t")
_UTF8MB4 = {"charset": "utf8mb4", "collation": "utf8mb4_general_ci"}
#: The table the statement forms below change (its columns as discovery reads them).
KNOWN = CreateTable(
    T,
    (
        Column("id", "int", "int(11)", nullable=False, precision=10, scale=0),
        Column("a", "int", "int(11)", precision=10, scale=0),
        Column("b", "int", "int(11)", precision=10, scale=0),
        Column("old", "varchar", "varchar(5)", length=5, **_UTF8MB4),
        Column("x", "datetime", "datetime", fsp=0),
        Column("e", "int", "int(11)", precision=10, scale=0),
        Column("f", "int", "int(11)", precision=10, scale=0),
    ),
    ("id",),
    collation="utf8mb4_general_ci",
)


def _known(table: TableId) -> CreateTable | None:
    return replace(KNOWN, table=table) if table.table in ("t", "a") else None


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
            where = () if c.position == "keep" else (c.position, c.after or "")
            out.append(("type", str(c.table), c.column.name, c.column.column_type, *where))
        elif isinstance(c, AlterColumnDefault):
            out.append(("default", str(c.table), c.column.name, str(c.column.default)))
        elif isinstance(c, PartitionRowsChanged):
            out.append(("rows", str(c.table), c.action))
        elif isinstance(c, AlterTableCollation):
            out.append(("collation", str(c.table), c.collation))
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
            [("drop", "db.t", "e"), ("drop", "db.t", "f"), ("add", "db.t", "d", "varchar(20)", "first", ""),
             ("add", "db.t", "c", "int(11)", "after", "b")],
        ),
        (
            "ALTER TABLE t ADD COLUMN (c INT UNSIGNED, d DECIMAL(10,2)), ADD (g ENUM('x','y''z'))",
            [("add", "db.t", "c", "int(10) unsigned", "last", ""),
             ("add", "db.t", "d", "decimal(10,2)", "last", ""),
             ("add", "db.t", "g", "enum('x','y''z')", "last", "")],
        ),
        ("ALTER TABLE t CHANGE COLUMN old new BIGINT NOT NULL",
         [("rename", "db.t", "old", "new"), ("type", "db.t", "new", "bigint(20)")]),
        ("ALTER TABLE t CHANGE old new TEXT",
         [("rename", "db.t", "old", "new"), ("type", "db.t", "new", "text")]),
        ("ALTER TABLE t MODIFY COLUMN x DATETIME(6) NULL", [("type", "db.t", "x", "datetime(6)")]),
        ("ALTER TABLE t MODIFY x POINT", [("type", "db.t", "x", "point")]),
        ("ALTER TABLE t RENAME COLUMN a TO b2", [("rename", "db.t", "a", "b2")]),
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
        ("CREATE OR REPLACE TABLE t (a INT)", [("drop-table", "db.t"), ("create", "db.t", "a", "pk")]),
        ("DROP TABLE IF EXISTS t, db2.u", [("drop-table", "db.t"), ("drop-table", "db2.u")]),
        ("TRUNCATE TABLE t", [("truncate", "db.t")]),
        ("TRUNCATE db2.t", [("truncate", "db2.t")]),
        ("RENAME TABLE a TO b, db2.c TO `db2`.`d`",
         [("rename-table", "db.a", "db.b"), ("rename-table", "db2.c", "db2.d")]),
        # the root causes the DDL corpus found (issue 20), one statement each
        ("RENAME TABLES a TO b", [("rename-table", "db.a", "db.b")]),
        ("DROP TABLES a, b", [("drop-table", "db.a"), ("drop-table", "db.b")]),
        ("RENAME /* gh-ost */ TABLE `db`.`t` TO `db`.`_t_del`, `db`.`_t_gho` TO `db`.`t`",
         [("rename-table", "db.t", "db._t_del"), ("rename-table", "db._t_gho", "db.t")]),
        ("DROP /*!40005 TEMPORARY */ TABLE IF EXISTS t", []),
        ("/*!40000 ALTER TABLE `t` DISABLE KEYS */", []),
        ("ALTER TABLE t MODIFY a BIGINT FIRST", [("type", "db.t", "a", "bigint(20)", "first", "")]),
        ("ALTER TABLE t CHANGE x x DATETIME AFTER id", [("type", "db.t", "x", "datetime", "after", "id")]),
        ("ALTER TABLE t DROP t.a", [("drop", "db.t", "a")]),
        ("ALTER TABLE t DROP COLUMN IF EXISTS nope, ADD COLUMN IF NOT EXISTS a INT", []),
        # the server resolves actions against the old table: MODIFY b names the old b, AFTER the new list
        ("ALTER TABLE t MODIFY b BIGINT FIRST, ADD z INT AFTER b, DROP e",
         [("drop", "db.t", "e"), ("type", "db.t", "b", "bigint(20)", "first", ""),
          ("add", "db.t", "z", "int(11)", "after", "b")]),
        ("ALTER TABLE t ALTER COLUMN a SET DEFAULT 1", [("default", "db.t", "a", "1")]),
        ("ALTER TABLE t DEFAULT CHARSET=latin1", [("collation", "db.t", "latin1_swedish_ci")]),
        ("ALTER TABLE t CONVERT TO CHARACTER SET utf8",
         [("type", "db.t", "old", "varchar(5)"), ("collation", "db.t", "utf8mb3_general_ci")]),
        ("ALTER TABLE t ADD PARTITION (PARTITION p2 VALUES LESS THAN (30)), STATS_PERSISTENT=0 "
         "AVG_ROW_LENGTH=10, ALTER INDEX i IGNORED", []),
        ("ALTER TABLE t REORGANIZE PARTITION p0 INTO (PARTITION p1 VALUES LESS THAN (5)), "
         "COALESCE PARTITION 2", []),
        # partition maintenance that changes rows without row events: the stream decides
        ("ALTER TABLE t DROP PARTITION p0, p1", [("rows", "db.t", "DROP PARTITION")]),
        ("ALTER TABLE t TRUNCATE PARTITION ALL", [("rows", "db.t", "TRUNCATE PARTITION")]),
        # the rows of a copied tablespace file replace the table's (DISCARD alone leaves it unread)
        ("ALTER TABLE t IMPORT TABLESPACE", [("rows", "db.t", "IMPORT TABLESPACE")]),
        ("ALTER TABLE t IMPORT PARTITION p0, p1 TABLESPACE", [("rows", "db.t", "IMPORT TABLESPACE")]),
        ("ALTER TABLE t DISCARD TABLESPACE", []),
        ("ALTER TABLE t EXCHANGE PARTITION p0 WITH TABLE db2.u WITHOUT VALIDATION",
         [("rows", "db.t", "EXCHANGE PARTITION"), ("rows", "db2.u", "EXCHANGE PARTITION")]),
        # ALTER IGNORE deletes the rows a new unique key finds duplicated
        ("ALTER IGNORE TABLE t ADD UNIQUE KEY (a)", [("rows", "db.t", "ALTER IGNORE … ADD UNIQUE")]),
        ("ALTER ONLINE IGNORE TABLE t ADD CONSTRAINT u UNIQUE (a)",
         [("rows", "db.t", "ALTER IGNORE … ADD UNIQUE")]),
        ("ALTER TABLE t ADD UNIQUE KEY (a)", []),
        ("ALTER IGNORE TABLE t ADD INDEX (a)", []),
        ("ALTER TABLE IF EXISTS gone ADD c INT", []),
        ("ALTER TABLE t ORDER BY t.a, b DESC", []),
        ("ALTER TABLE t ADD COLUMN t.c INT", [("add", "db.t", "c", "int(11)", "last", "")]),
    ],
)  # fmt: skip
def test_statement_forms(statement: str, expected: list[tuple[str, ...]]) -> None:
    assert _kinds(parse_ddl(statement, "db", _known)) == expected


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
        "ALTER TABLE t COMMENT 'x'",
        "FLUSH TABLES",
        "CREATE DATABASE d",
        "SAVEPOINT s",
        "RENAME USER a TO b",
    ],
)
def test_statements_that_change_no_table_are_ignored(statement: str) -> None:
    assert parse_ddl(statement, "db", _known) == []


@pytest.mark.parametrize(
    ("statement", "reason"),
    [
        ("CREATE TABLE t AS SELECT 1 AS a", "SELECT"),
        ("CREATE TABLE t2 (a INT) SELECT 1 AS a", "SELECT"),
        ("CREATE TABLE t2 LIKE unknown", "does not know"),
        ("CREATE TABLE t2 (a INT) WITH SYSTEM VERSIONING", "system-versioned"),
        ("ALTER TABLE t ADD PERIOD FOR SYSTEM_TIME(s, e), ADD SYSTEM VERSIONING", "system-versioned"),
        ("ALTER TABLE t ADD PRIMARY KEY (a)", "has a primary key already"),
        ("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (nothing)", "no column `nothing`"),
        ("ALTER TABLE t ADD c SOMETYPE", "."),
        ("ALTER TABLE unknown ADD c INT", "does not know"),
    ],
)
def test_table_statements_it_cannot_read_are_reported(statement: str, reason: str) -> None:
    with pytest.raises(UnparsedDdlError, match=reason):
        parse_ddl(statement, "db", _known)


def test_statements_about_tables_binlake_does_not_track_never_fail() -> None:
    """A shadow table outside ``source.tables`` (gh-ost's `_t_gho`) may do anything."""
    untracked = {"statement": False}
    for statement in ("ALTER TABLE _t_gho ADD c SOMETYPE", "CREATE TABLE _t_new AS SELECT 1",
                      "ALTER TABLE _t_gho DROP PARTITION p0"):  # fmt: skip
        assert parse_ddl(statement, "db", _none, tracked=lambda _t: untracked["statement"]) == []


def test_create_like_copies_the_known_schema() -> None:
    source = CreateTable(TableId("db", "src"), (), ("id",))
    (created,) = parse_ddl("CREATE TABLE t LIKE src", "db", lambda t: source if t == source.table else None)
    assert created == CreateTable(T, (), ("id",))
    (created,) = parse_ddl("CREATE TABLE t (LIKE src)", "db", lambda t: source if t == source.table else None)
    assert created == CreateTable(T, (), ("id",))


@pytest.mark.parametrize(
    ("definition", "column_type", "fields"),
    [
        ("a INT ZEROFILL", "int(10) unsigned zerofill", {"unsigned": True}),
        ("a REAL", "double", {"data_type": "double"}),
        ("a FLOAT(30)", "double", {"data_type": "double"}),
        ("a FLOAT(10)", "float", {"data_type": "float"}),
        ("a LONG", "mediumtext", {"data_type": "mediumtext"}),
        ("a LONG VARCHAR", "mediumtext", {"data_type": "mediumtext"}),
        ("a LONG VARBINARY", "mediumblob", {"data_type": "mediumblob"}),
        ("a INT8", "bigint(20)", {"data_type": "bigint"}),
        ("a MIDDLEINT", "mediumint(9)", {"data_type": "mediumint"}),
        ("a CHAR(3) CHARACTER SET binary", "binary(3)", {"data_type": "binary"}),
        ("a VARCHAR(3) CHARSET binary", "varbinary(3)", {"data_type": "varbinary"}),
        ("a CHAR VARYING(4)", "varchar(4)", {"data_type": "varchar"}),
        ("a NATIONAL VARCHAR(4)", "varchar(4)", {"charset": "utf8mb3", "collation": "utf8mb3_general_ci"}),
        ("a VARCHAR(4) CHARACTER SET utf8", "varchar(4)", {"collation": "utf8mb3_general_ci"}),
        ("a CHAR(2) ASCII", "char(2)", {"charset": "latin1"}),
        ("a CHAR(2) UNICODE", "char(2)", {"charset": "ucs2"}),
        ("a TEXT(300)", "text", {"length": 65535}),
        ("a TEXT(50)", "tinytext", {"length": 255}),
        ("a BLOB(70000)", "mediumblob", {"length": 16777215}),
        ("a DECIMAL(19.5)", "decimal(19,0)", {"precision": 19, "scale": 0}),
        ("a ENUM('x\\'y ', 'z  ', 0x41)", "enum('x''y','z','A')", {"values": ("x'y", "z", "A")}),
        ("a SERIAL", "bigint(20) unsigned", {"nullable": False, "auto_increment": True}),
        ("a INT SERIAL DEFAULT VALUE", "int(11)", {"nullable": False, "auto_increment": True}),
        ("a FLOAT UNSIGNED", "float unsigned", {"unsigned": True}),
        ("a MEDIUMINT UNSIGNED", "mediumint(8) unsigned", {"precision": 8}),
        ("a INT DEFAULT '7'", "int(11)", {"default": "7"}),
        ("a VARCHAR(5) DEFAULT 'it''s'", "varchar(5)", {"default": "'it''s'"}),
        ("a DATETIME(3) DEFAULT '2024-01-01 1:2:3'", "datetime(3)", {"default": "'2024-01-01 01:02:03.000'"}),
        ("a TIMESTAMP(2) DEFAULT CURRENT_TIMESTAMP(2)", "timestamp(2)", {"default": "current_timestamp(2)"}),
        ("a DECIMAL(5,2) DEFAULT '1.5'", "decimal(5,2)", {"default": "1.50"}),
        ("a BIT(3) DEFAULT b'101'", "bit(3)", {"default": "b'101'"}),
        ("a YEAR DEFAULT 1", "year(4)", {"default": "2001"}),
        # the synonyms and zero sizes the server accepts (the DDL tail of the peers' suites)
        ("a SMALLINT(0)", "smallint(6)", {}),
        ("a INT(0) UNSIGNED", "int(10) unsigned", {}),
        ("a NATIONAL VARCHARACTER(10)", "varchar(10)", {"charset": "utf8mb3"}),
        ("a LONG CHAR VARYING", "mediumtext", {"charset": "utf8mb4"}),
        ("a LONG CHARACTER VARYING", "mediumtext", {"charset": "utf8mb4"}),
        ("a LONG CHARACTER SET latin1", "mediumtext", {"charset": "latin1"}),
        ("a LONG VARBINARY", "mediumblob", {"charset": None}),
        ("a DOUBLE(0,0)", "double", {"precision": 22, "scale": None}),
        ("a TEXT(0)", "text", {"length": 65535}),
        ("a BLOB(0)", "blob", {"length": 65535}),
    ],
)  # fmt: skip
def test_column_types_are_read_as_the_server_stores_them(
    definition: str, column_type: str, fields: dict[str, object]
) -> None:
    (created,) = parse_ddl(f"CREATE TABLE n ({definition})", "db", _none)
    assert isinstance(created, CreateTable)
    (column,) = created.columns
    assert column.column_type == column_type
    assert {k: getattr(column, k) for k in fields} == fields


def test_a_key_spelled_differently_takes_the_column_spelling() -> None:
    (created,) = parse_ddl("CREATE TABLE n (id INT, CONSTRAINT pk PRIMARY KEY (ID))", "db", _none)
    assert isinstance(created, CreateTable)
    assert created.primary_key == ("id",)
    assert created.columns[0].nullable is False


def test_a_table_without_a_charset_takes_its_database_default() -> None:
    charsets = Charsets(database_collation={"latin": "latin1_swedish_ci"}.get)
    (created,) = parse_ddl("CREATE TABLE latin.n (a VARCHAR(3))", "db", _none, charsets)
    assert isinstance(created, CreateTable)
    assert (created.collation, created.columns[0].collation) == ("latin1_swedish_ci", "latin1_swedish_ci")


def test_columns_named_like_types_keep_their_names() -> None:
    (created,) = parse_ddl("CREATE TABLE n (point POINT, polygon INT, `date` DATE)", "db", _none)
    assert isinstance(created, CreateTable)
    assert [(c.name, c.data_type) for c in created.columns] == [
        ("point", "point"), ("polygon", "int"), ("date", "date")
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("statement", "key"),
    [
        ("ALTER TABLE t DROP PRIMARY KEY", ()),
        ("ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, old)", ("id", "old")),
        ("ALTER TABLE t DROP PRIMARY KEY, ADD CONSTRAINT pk PRIMARY KEY USING BTREE (OLD(3) DESC)", ("old",)),
        ("ALTER TABLE t DROP PRIMARY KEY, ADD (c INT NOT NULL, PRIMARY KEY (c))", ("c",)),
        ("ALTER TABLE t DROP PRIMARY KEY, CHANGE old nm VARCHAR(20) PRIMARY KEY", ("nm",)),
        ("ALTER TABLE t DROP PRIMARY KEY, DROP COLUMN id, ADD c INT AUTO_INCREMENT PRIMARY KEY", ("c",)),
    ],
)
def test_primary_key_changes(statement: str, key: tuple[str, ...]) -> None:
    changes = parse_ddl(statement, "db", _known)
    assert changes[-1] == AlterPrimaryKey(TableId("db", "t"), key)
    schema = _known(TableId("db", "t"))
    for change in changes:
        schema = evolve(TableId("db", "t"), schema, change)
    assert schema is not None
    assert schema.primary_key == key
    assert all(not schema.column(k).nullable for k in key)  # the server makes them NOT NULL


def test_a_renamed_key_column_is_no_key_change() -> None:
    changes = parse_ddl("ALTER TABLE t RENAME COLUMN id TO ident", "db", _known)
    assert not any(isinstance(c, AlterPrimaryKey) for c in changes)


def test_modify_of_a_key_column_keeps_it_not_null() -> None:
    (change,) = parse_ddl("ALTER TABLE t MODIFY id BIGINT", "db", _known)
    assert isinstance(change, AlterColumnType)
    assert change.column.nullable is False


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
    "ALTER TABLE t DROP PRIMARY KEY, ADD PRIMARY KEY (id, b)",
    "ALTER TABLE t DROP PRIMARY KEY",
    "ALTER TABLE t DROP PRIMARY KEY, ADD d2 INT AUTO_INCREMENT PRIMARY KEY FIRST",
    "ALTER TABLE t DROP PRIMARY KEY, MODIFY d DECIMAL(8,2) PRIMARY KEY",
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


def test_adding_a_column_the_table_has_says_the_schema_is_out_of_step() -> None:
    """The server refuses a duplicate column, so meeting one means binlake's schema is not the
    server's: a refusal naming the column, not a crash."""
    from binlake.events import Column, CreateTable, TableId
    from binlake.source.ddl.parser import UnparsedDdlError, parse_ddl

    table = CreateTable(TableId("db", "t"), (Column("id", "int", "int(11)", nullable=False),), ("id",))
    with pytest.raises(UnparsedDdlError, match=r"`id`: db\.t has it already"):
        parse_ddl("ALTER TABLE t ADD COLUMN id INT", "db", {table.table: table}.get)
    assert parse_ddl("ALTER TABLE t ADD COLUMN IF NOT EXISTS id INT", "db", {table.table: table}.get) == []


def test_a_dropped_database_drops_the_tables_binlake_knows_in_it() -> None:
    """``DROP DATABASE`` writes no ``DROP TABLE`` of its tables to the binlog."""
    known = [TableId("shop", "orders"), TableId("shop", "items"), TableId("other", "t")]

    def tables_of(database: str) -> list[TableId]:
        return [t for t in known if t.database == database]

    for statement in ("DROP DATABASE shop", "DROP SCHEMA IF EXISTS `shop`"):
        changes = parse_ddl(statement, "db", _known, tables_of=tables_of)
        assert changes == [DropTable(TableId("shop", "items")), DropTable(TableId("shop", "orders"))]
    assert parse_ddl("DROP DATABASE empty", "db", _known, tables_of=tables_of) == []
    assert parse_ddl("DROP DATABASE shop", "db", _known) == []  # no tables known
