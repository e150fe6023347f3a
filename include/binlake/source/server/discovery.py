"""Which source tables a pipeline captures, and their schemas as ``CreateTable`` events.

Everything comes from ``information_schema`` in a few set-based queries (not one per table), so
discovery stays quick on servers with thousands of tables.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pymysql

from binlake.config import SourceConfig
from binlake.events import Column, CreateTable, TableId
from binlake.schema.shadow_tables import shadow_base
from binlake.source.server.charsets import Charsets, canonical_charset, canonical_collation

#: Schemas that belong to the server, never captured.
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


@dataclass(frozen=True)
class TableSelector:
    """Include regexes minus exclude regexes, matched in full against ``database.table`` — and the
    shadow tables of online schema-change tools for every table they select.

    A cut-over (``RENAME TABLE t TO _t_del, _t_gho TO t``) swaps the shadow's rows in for the
    table's; capturing the shadow from its creation on gives the sink those rows and the new
    schema exactly, with no backfill.
    """

    include: Sequence[str]
    exclude: Sequence[str] = ()

    def matches(self, table: TableId) -> bool:
        return self._selected(table) or self.shadow_of(table) is not None

    def shadow_of(self, table: TableId) -> TableId | None:
        """The selected table ``table`` is an online schema-change tool's shadow of, if any."""
        base = shadow_base(table)
        return base if base is not None and self._selected(base) else None

    def _selected(self, table: TableId) -> bool:
        name = table.name
        return any(re.fullmatch(p, name) for p in self.include) and not any(
            re.fullmatch(p, name) for p in self.exclude
        )

    def select(self, tables: Iterable[TableId]) -> list[TableId]:
        return sorted(t for t in tables if self.matches(t))

    def unmatched_patterns(self, tables: Iterable[TableId]) -> list[str]:
        """Include patterns that match no table (likely typos)."""
        names = [t.name for t in tables]
        return [p for p in self.include if not any(re.fullmatch(p, n) for n in names)]


def list_tables(conn: pymysql.Connection[Any], kind: str = "BASE TABLE") -> list[TableId]:
    """Every base table (or table of ``kind``: MariaDB's ``SYSTEM VERSIONED``) the connected user
    can see, outside the system schemas (views skipped)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_TYPE = %s AND TABLE_SCHEMA NOT IN %s",
            (kind, tuple(SYSTEM_SCHEMAS)),
        )
        return sorted(TableId(str(db), str(t)) for db, t in cur.fetchall())


def captured_tables(conn: pymysql.Connection[Any], source: SourceConfig) -> list[TableId]:
    """The tables ``source.tables`` matches, less ``source.tables_exclude``, as the server lists them."""
    return TableSelector(source.tables, source.tables_exclude).select(list_tables(conn))


def rows_of(conn: pymysql.Connection[Any], sql: str, tables: Sequence[TableId]) -> list[tuple[Any, ...]]:
    """The rows of ``sql``, an ``information_schema`` query whose ``%s`` placeholders take the
    databases, then the names, of ``tables`` (``TABLE_SCHEMA IN %s AND TABLE_NAME IN %s``); the
    callers keep the exact pairs.

    Naming the tables, not only their databases: a query of one table's columns otherwise reads
    every table's of its database (a snapshot task's schema check cost 70 ms at 200 tables in the
    database, and grew with it). In rounds of spellings that differ by more than case: given
    ``IN ('T', 't')`` (names, or databases), MariaDB's lookup returns one of the two tables only
    (checked on 10.11), and two such tables may both exist where names are case-sensitive. Some
    tables (``KEY_COLUMN_USAGE``) match a name whatever its case: a row two rounds return counts
    once."""
    found: list[tuple[Any, ...]] = []
    earlier: set[tuple[Any, ...]] = set()
    with conn.cursor() as cur:
        for databases, names in _case_rounds(tables):
            cur.execute(sql, (tuple(sorted(databases)), tuple(sorted(names))))
            rows = cur.fetchall()
            found += [r for r in rows if r not in earlier]  # some tables match each spelling
            earlier.update(rows)
    return found


def _case_rounds(tables: Sequence[TableId]) -> list[tuple[set[str], set[str]]]:
    """``tables`` as rounds of (databases, names), no two of a round's databases (or names)
    the same but for case."""
    rounds: list[tuple[dict[str, str], dict[str, str]]] = []  # each: spelling by folded, of both
    for table in tables:
        spot = next((r for r in rounds if _fits(r[0], table.database) and _fits(r[1], table.table)), None)
        if spot is None:
            spot = ({}, {})
            rounds.append(spot)
        spot[0][table.database.lower()] = table.database
        spot[1][table.table.lower()] = table.table
    return [(set(databases.values()), set(names.values())) for databases, names in rounds]


def _fits(spellings: dict[str, str], name: str) -> bool:
    return spellings.get(name.lower(), name) == name


def primary_keys(conn: pymysql.Connection[Any], tables: Sequence[TableId]) -> dict[TableId, list[str]]:
    """Primary-key columns in key order for each table (an empty list: no primary key)."""
    return _columns_by_table(
        conn,
        tables,
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
        "WHERE CONSTRAINT_NAME = 'PRIMARY' AND TABLE_SCHEMA IN %s AND TABLE_NAME IN %s "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
    )


def column_names(conn: pymysql.Connection[Any], tables: Sequence[TableId]) -> dict[TableId, list[str]]:
    """Column names in table order for each table."""
    return _columns_by_table(
        conn,
        tables,
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA IN %s AND TABLE_NAME IN %s ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
    )


def _columns_by_table(
    conn: pymysql.Connection[Any], tables: Sequence[TableId], sql: str
) -> dict[TableId, list[str]]:
    """Run ``sql`` (schema, table, column rows; ``%s`` for the schemas, then the names:
    ``rows_of``) grouped by table."""
    columns: dict[TableId, list[str]] = {t: [] for t in tables}
    if not tables:
        return columns
    for db, table, column in rows_of(conn, sql, tables):
        key = TableId(str(db), str(table))
        if key in columns:
            columns[key].append(str(column))
    return columns


_COLUMNS_SQL = (
    "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME, COLUMN_DEFAULT, IS_NULLABLE, DATA_TYPE, COLUMN_TYPE, "
    "CHARACTER_MAXIMUM_LENGTH, NUMERIC_PRECISION, NUMERIC_SCALE, DATETIME_PRECISION, "
    "CHARACTER_SET_NAME, COLLATION_NAME, EXTRA "
    "FROM information_schema.COLUMNS WHERE TABLE_SCHEMA IN %s AND TABLE_NAME IN %s "
    "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION"
)


def discover(conn: pymysql.Connection[Any], tables: Sequence[TableId]) -> list[CreateTable]:
    """The schema of each table, as ``CreateTable`` events, in the order given.

    A table that no longer exists is left out (the caller compares and reports it).
    """
    if not tables:
        return []
    wanted = set(tables)
    columns: dict[TableId, list[Column]] = {}
    json_columns = _mariadb_json_columns(conn, tables)
    for row in rows_of(conn, _COLUMNS_SQL, tables):
        table = TableId(str(row[0]), str(row[1]))
        if table in wanted:
            columns.setdefault(table, []).append(_column(row, (table, str(row[2])) in json_columns))
    keys = primary_keys(conn, tables)
    collations = _table_collations(conn, tables)
    return [
        CreateTable(table, tuple(columns[table]), tuple(keys[table]), collation=collations.get(table))
        for table in tables
        if table in columns
    ]


def same_schema(a: CreateTable, b: CreateTable) -> bool:
    """Whether rows of ``a`` and ``b`` read and decode alike: the same columns (all but their
    defaults, which only decide values the server fills) and the same primary key."""
    return _shape(a) == _shape(b) and a.primary_key == b.primary_key


def schema_difference(before: CreateTable, after: CreateTable) -> str:
    """What changed between two schemas of a table, for people (column names, never values)."""
    old, new = (
        dict(zip(before.column_names, _shape(before), strict=True)),
        dict(zip(after.column_names, _shape(after), strict=True)),
    )
    parts = [f"added {', '.join(n for n in new if n not in old)}"] if set(new) - set(old) else []
    parts += [f"dropped {', '.join(n for n in old if n not in new)}"] if set(old) - set(new) else []
    changed = [n for n in new if n in old and new[n] != old[n]]
    parts += [f"changed {', '.join(changed)}"] if changed else []
    if not parts and before.column_names != after.column_names:
        parts.append("columns reordered")
    if before.primary_key != after.primary_key:
        parts.append(f"primary key ({', '.join(before.primary_key)}) → ({', '.join(after.primary_key)})")
    return "; ".join(parts) or "nothing binlake reads"


def _shape(table: CreateTable) -> tuple[Column, ...]:
    return tuple(replace(c, default=None) for c in table.columns)


def _table_collations(conn: pymysql.Connection[Any], tables: Sequence[TableId]) -> dict[TableId, str]:
    rows = rows_of(
        conn,
        "SELECT TABLE_SCHEMA, TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES "
        "WHERE TABLE_SCHEMA IN %s AND TABLE_NAME IN %s",
        tables,
    )
    return {TableId(str(r[0]), str(r[1])): str(r[2]) for r in rows if r[2] is not None}


def _column(row: tuple[Any, ...], is_json: bool) -> Column:
    (
        _,
        _,
        name,
        default,
        nullable,
        data_type,
        column_type,
        length,
        precision,
        scale,
        fsp,
        charset,
        collation,
        extra,
    ) = row
    data_type = "json" if is_json else str(data_type).lower()
    members = data_type in ("enum", "set")
    # ENUM/SET members keep their case (the decoder maps a row's index to them), and a member
    # spelled "unsigned" says nothing about signedness
    column_type = str(column_type) if members else str(column_type).lower()
    return Column(
        name=str(name),
        data_type=data_type,
        column_type=column_type,
        nullable=str(nullable).upper() == "YES",
        unsigned=not members and "unsigned" in column_type,
        precision=None if precision is None else int(precision),
        scale=None if scale is None else int(scale),
        fsp=None if fsp is None else int(fsp),
        length=None if length is None else int(length),
        charset=None if charset is None else str(charset),
        collation=None if collation is None or is_json else str(collation),
        values=parse_enum_values(column_type) if members else (),
        default=None if default is None else str(default),
        auto_increment="auto_increment" in str(extra).lower(),
        generated="generated" in str(extra).lower(),  # MySQL and MariaDB: VIRTUAL|STORED GENERATED
    )


def parse_enum_values(column_type: str) -> tuple[str, ...]:
    """The members of ``enum('a','it''s')`` or ``set(...)`` as the server holds them: the SQL
    tokenizer undoes every escape the server writes there (doubled quotes, backslash sequences
    such as a newline's), where a scanner of its own had read a newline as the letter n.

    Without a backslash or a doubled quote the text holds no escape, and each member is what lies
    between two quotes: read so, without the tokenizer (sqlglot's import is 0.13 s of every
    snapshot task worker's first table with such a column)."""
    if "\\" not in column_type and "''" not in column_type:
        return tuple(_PLAIN_MEMBER.findall(column_type))
    from binlake.source.ddl.tokens import tokens

    return tuple(t.text for t in tokens(column_type) if t.kind == "string")


#: A quoted member holding no escape (``parse_enum_values``).
_PLAIN_MEMBER = re.compile(r"'([^']*)'")


def _mariadb_json_columns(
    conn: pymysql.Connection[Any], tables: Sequence[TableId]
) -> set[tuple[TableId, str]]:
    """MariaDB stores JSON as LONGTEXT with a ``json_valid(col)`` check; find those columns."""
    try:
        rows = rows_of(
            conn,
            "SELECT CONSTRAINT_SCHEMA, TABLE_NAME, CHECK_CLAUSE FROM information_schema.CHECK_CONSTRAINTS "
            "WHERE CONSTRAINT_SCHEMA IN %s AND TABLE_NAME IN %s AND CHECK_CLAUSE LIKE 'json_valid(%%'",
            tables,
        )
    except pymysql.err.MySQLError:
        return set()  # servers without CHECK_CONSTRAINTS have no such columns either
    found = set()
    for db, table, clause in rows:
        column = str(clause)[len("json_valid(") : -1].strip("`")
        found.add((TableId(str(db), str(table)), column.replace("``", "`")))
    return found


def server_charsets(conn: pymysql.Connection[Any]) -> Charsets:
    """The charset defaults DDL leaves implicit, as the server holds them now: each charset's
    default collation, each database's default collation and the server's."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT CHARACTER_SET_NAME, COLLATION_NAME FROM information_schema.COLLATIONS "
            "WHERE IS_DEFAULT = 'Yes'"
        )
        defaults = {canonical_charset(str(c)): canonical_collation(str(n)) for c, n in cur.fetchall()}
        cur.execute("SELECT SCHEMA_NAME, DEFAULT_COLLATION_NAME FROM information_schema.SCHEMATA")
        databases = {str(d): canonical_collation(str(c)) for d, c in cur.fetchall() if c is not None}
        cur.execute("SELECT @@collation_server")
        row = cur.fetchone()
    server = canonical_collation(str(row[0])) if row and row[0] else "utf8mb4_general_ci"
    return Charsets(defaults, databases.get, server)
