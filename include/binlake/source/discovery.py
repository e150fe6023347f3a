"""Which source tables a pipeline captures, and their keys.

Issue-level note: full schema discovery (columns, types, defaults as ``CreateTable`` events) builds
on the table selection here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pymysql

#: Schemas that belong to the server, never captured.
SYSTEM_SCHEMAS = frozenset({"mysql", "information_schema", "performance_schema", "sys"})


@dataclass(frozen=True, order=True)
class TableId:
    """A source table: database and table name."""

    database: str
    table: str

    @property
    def name(self) -> str:
        return f"{self.database}.{self.table}"

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class TableSelector:
    """Include regexes minus exclude regexes, matched in full against ``database.table``."""

    include: Sequence[str]
    exclude: Sequence[str] = ()

    def matches(self, table: TableId) -> bool:
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


def list_tables(conn: pymysql.Connection[Any]) -> list[TableId]:
    """Every base table the connected user can see, outside the system schemas (views skipped)."""
    with conn.cursor() as cur:
        cur.execute(
            "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.TABLES "
            "WHERE TABLE_TYPE = 'BASE TABLE' AND TABLE_SCHEMA NOT IN %s",
            (tuple(SYSTEM_SCHEMAS),),
        )
        return sorted(TableId(str(db), str(t)) for db, t in cur.fetchall())


def primary_keys(conn: pymysql.Connection[Any], tables: Sequence[TableId]) -> dict[TableId, list[str]]:
    """Primary-key columns in key order for each table (an empty list: no primary key)."""
    return _columns_by_table(
        conn,
        tables,
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.KEY_COLUMN_USAGE "
        "WHERE CONSTRAINT_NAME = 'PRIMARY' AND TABLE_SCHEMA IN %s "
        "ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
    )


def column_names(conn: pymysql.Connection[Any], tables: Sequence[TableId]) -> dict[TableId, list[str]]:
    """Column names in table order for each table."""
    return _columns_by_table(
        conn,
        tables,
        "SELECT TABLE_SCHEMA, TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS "
        "WHERE TABLE_SCHEMA IN %s ORDER BY TABLE_SCHEMA, TABLE_NAME, ORDINAL_POSITION",
    )


def _columns_by_table(
    conn: pymysql.Connection[Any], tables: Sequence[TableId], sql: str
) -> dict[TableId, list[str]]:
    """Run ``sql`` (schema, table, column rows; one ``%s`` for the schemas) grouped by table."""
    columns: dict[TableId, list[str]] = {t: [] for t in tables}
    if not tables:
        return columns
    with conn.cursor() as cur:
        cur.execute(sql, (tuple({t.database for t in tables}),))
        for db, table, column in cur.fetchall():
            key = TableId(str(db), str(table))
            if key in columns:
                columns[key].append(str(column))
    return columns
