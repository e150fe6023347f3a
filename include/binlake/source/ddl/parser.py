"""DDL from the binlog's query events → binlake ``SchemaChange`` events (seed 001's parser role).

A recursive-descent reader of the table statements MySQL and MariaDB write to the binlog —
``CREATE [OR REPLACE] TABLE``, ``ALTER TABLE``, ``DROP TABLE[S]``, ``RENAME TABLE[S]``,
``TRUNCATE`` — over sqlglot's tokenizer (``tokens``; column definitions in ``columns``,
shared clauses in ``clauses``, ALTER's action list in ``alter_actions``).
Everything else — GRANT, CREATE USER (whose text may hold a password), views, indexes, ANALYZE —
is recognised by its first words and ignored without being read further or logged.

``ALTER TABLE`` is not read action by action in text order: the server resolves all of a
statement's actions against the table as it was (``CHANGE``/``MODIFY``/``DROP`` name old columns,
``FIRST``/``AFTER`` place columns in the new list, positioned columns go in after the others),
so the parser runs the same algorithm (``alter``) on the table's current schema and states the
difference as ``SchemaChange`` events the sink can make one by one: drops, renames, then each
column in its new order (added, moved or retyped), then the table's default collation.

A table statement binlake cannot follow raises ``UnparsedDdlError`` — only when it concerns a
table the caller tracks: a statement about other tables changes nothing binlake keeps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from binlake.events import (
    CreateTable,
    DropTable,
    RenameTable,
    SchemaChange,
    TableId,
    TruncateTable,
)
from binlake.source.ddl.alter_actions import AlterReader
from binlake.source.ddl.clauses import (
    ITEM_WORDS,
    VERSIONED,
    DdlScope,
    Lookup,
    key_item,
    merge_engine,
    selects,
    skip_partitioning,
)
from binlake.source.ddl.columns import (
    ColumnDef,
    column_definition,
)
from binlake.source.ddl.tokens import Cursor, UnparsedDdlError, skip_option, skip_wait, tokens
from binlake.source.server.charsets import Charsets, canonical_charset, canonical_collation, charset_of

__all__ = ["Charsets", "Lookup", "UnparsedDdlError", "parse_ddl"]

# sqlglot warns with the statement's text in some cases; no statement text may reach a log.
logging.getLogger("sqlglot").setLevel(logging.ERROR)


def parse_ddl(
    statement: str,
    database: str,
    lookup: Lookup,
    charsets: Charsets | None = None,
    tracked: Callable[[TableId], bool] | None = None,
    tables_of: Callable[[str], Iterable[TableId]] | None = None,
) -> list[SchemaChange]:
    """The schema changes ``statement`` makes ([] for statements that change no table).

    Args:
        statement: the query event's text.
        database: the event's default database (unqualified names belong to it).
        lookup: a table's schema before this statement, or None if binlake does not know it.
        charsets: the server's charset defaults (the table's database default, each charset's
            default collation); MariaDB's built-in defaults when None.
        tracked: whether binlake keeps a table's schema (a table it does not track never makes
            a statement fail); every table when None.
        tables_of: the tables binlake knows in a database (``DROP DATABASE`` drops them); none
            when None.
    """
    reader = _Reader(database, lookup, charsets or Charsets(), tracked or (lambda _t: True))
    reader.tables_of = tables_of or (lambda _database: ())
    return reader.statement(Cursor(tokens(statement)))


class _Reader(DdlScope):
    """Reads one statement (``statement``) into the changes it makes."""

    tables_of: Callable[[str], Iterable[TableId]]

    def statement(self, cur: Cursor) -> list[SchemaChange]:
        verb = cur.peek_upper()
        if verb == "CREATE":
            return self._create(cur)
        if verb == "ALTER":
            return AlterReader(self.database, self.lookup, self.charsets, self.tracked).read(cur)
        if verb == "DROP":
            return self._drop(cur)
        if verb == "RENAME":
            return self._rename(cur)
        if verb == "TRUNCATE":
            cur.next()
            cur.accept("TABLE")
            return [TruncateTable(self._table(cur))]
        return []

    # -- DROP, RENAME --------------------------------------------------------------------------

    def _drop(self, cur: Cursor) -> list[SchemaChange]:
        cur.next()
        if cur.accept("TEMPORARY"):
            return []  # a temporary table shadows, never drops, the table of that name
        if cur.accept("DATABASE") or cur.accept("SCHEMA"):
            cur.accept("IF", "EXISTS")
            # Its tables go with it, without a DROP TABLE of their own in the binlog.
            return [DropTable(t) for t in sorted(self.tables_of(cur.dotted()[0]), key=lambda t: t.name)]
        if not (cur.accept("TABLE") or cur.accept("TABLES")):
            return []
        cur.accept("IF", "EXISTS")
        changes: list[SchemaChange] = [DropTable(self._table(cur))]
        while cur.accept_punct(","):
            changes.append(DropTable(self._table(cur)))
        return changes

    def _rename(self, cur: Cursor) -> list[SchemaChange]:
        cur.next()
        if not (cur.accept("TABLE") or cur.accept("TABLES")):
            return []  # RENAME USER
        if_exists = cur.accept("IF", "EXISTS")
        changes: list[SchemaChange] = []
        renamed: dict[TableId, bool] = {}  # tables that exist after the renames so far
        while True:
            old = self._table(cur)
            skip_wait(cur)
            if not cur.accept("TO"):
                raise UnparsedDdlError("RENAME TABLE without TO")
            new = self._table(cur)
            exists = renamed.get(old, self.lookup(old) is not None or not self.tracked(old))
            if exists or not if_exists:  # IF EXISTS skips a table that is not there
                changes.append(RenameTable(old, new))
                renamed[old], renamed[new] = False, True
            if not cur.accept_punct(","):
                return changes

    # -- CREATE TABLE --------------------------------------------------------------------------

    def _create(self, cur: Cursor) -> list[SchemaChange]:
        cur.next()
        replacing = cur.accept("OR", "REPLACE")
        if cur.accept("TEMPORARY") or not cur.accept("TABLE"):
            return []
        if_not_exists = cur.accept("IF", "NOT", "EXISTS")
        table = self._table(cur)
        existing = self.lookup(table)
        if if_not_exists and existing is not None:
            return []
        try:
            created = self._create_body(cur, table)
        except UnparsedDdlError as e:
            return self._refuse(table, str(e))
        if created is None:
            return self._refuse(
                table,
                f"CREATE TABLE {table} … SELECT: the new table's column types are not in the statement",
            )
        if isinstance(created, list):
            return created
        return [DropTable(table), created] if replacing and existing is not None else [created]

    def _create_body(self, cur: Cursor, table: TableId) -> CreateTable | list[SchemaChange] | None:
        if cur.accept("LIKE") or (cur.is_punct("(") and cur.peek_upper(1) == "LIKE"):
            return self._like(cur, table)
        if not cur.is_punct("("):
            return None if selects(cur) else self._refuse(table, "CREATE TABLE without a column list")
        start = cur.at
        cur.skip_parenthesised()  # the options after the list decide the columns' charset
        charset = self._table_options(cur, self.charsets.database_default(table.database))
        if cur.peek_upper() == "WITH" and cur.peek_upper(1) == "SYSTEM":
            raise UnparsedDdlError(VERSIONED)
        if selects(cur):
            return None
        columns, keys = self._column_list(Cursor(cur.toks[start : cur.at]), charset)
        return _created(table, columns, keys, charset[1])

    def _like(self, cur: Cursor, table: TableId) -> list[SchemaChange]:
        parenthesised = cur.accept_punct("(")
        cur.accept("LIKE")
        source = self._table(cur)
        if parenthesised:
            cur.expect_punct(")")
        known = self.lookup(source)
        if known is None:
            return self._refuse(table, f"CREATE TABLE {table} LIKE {source}: binlake does not know {source}")
        return [replace(known, table=table)]

    def _column_list(self, cur: Cursor, charset: tuple[str, str]) -> tuple[list[ColumnDef], list[str]]:
        cur.expect_punct("(")
        columns: list[ColumnDef] = []
        keys: list[str] = []
        while True:
            item_key = self._item(cur, charset, columns)
            if item_key is not None:
                keys = item_key
            if cur.accept_punct(")"):
                return columns, keys
            cur.expect_punct(",")

    def _item(self, cur: Cursor, charset: tuple[str, str], columns: list[ColumnDef]) -> list[str] | None:
        """One item of a column list; the primary key's columns if it declares one."""
        tok = cur.peek()
        word = cur.peek_upper()
        if (
            tok is not None
            and tok.kind == "word"
            and (word in ITEM_WORDS or (word == "PERIOD" and cur.peek_upper(1) == "FOR"))
        ):
            return key_item(cur)
        name = cur.dotted()[-1]  # t.col, db.t.col
        definition = column_definition(cur, name, charset, self.charsets)
        columns.append(definition)
        return [name] if definition.primary_key else None

    def _table_options(self, cur: Cursor, database: tuple[str, str]) -> tuple[str, str]:
        charset: str | None = None
        collation: str | None = None
        while not cur.done() and not selects(cur):
            if cur.accept_punct(","):
                continue
            cur.accept("DEFAULT")
            if cur.accept("CHARACTER", "SET") or cur.accept("CHARSET") or cur.accept("CHAR", "SET"):
                cur.accept_punct("=")
                charset = canonical_charset(cur.name())
            elif cur.accept("COLLATE"):
                cur.accept_punct("=")
                collation = canonical_collation(cur.name())
            elif cur.peek_upper() == "PARTITION":
                skip_partitioning(cur)
            elif cur.peek_upper() in ("ENGINE", "TYPE") and merge_engine(cur):
                raise UnparsedDdlError(
                    "a MERGE table holds no rows of its own: capture its underlying tables"
                )
            else:
                skip_option(cur)
        if charset == "default":
            charset = None
        if charset is None and collation is None:
            return database
        if collation is None:
            assert charset is not None
            collation = self.charsets.collation_of(charset)
        return charset_of(collation), collation


def _created(table: TableId, columns: list[ColumnDef], keys: list[str], collation: str) -> CreateTable:
    names = {d.column.name.lower(): d.column.name for d in columns}
    keys = [names.get(k.lower(), k) for k in keys]  # PRIMARY KEY (ID) for a column `id`
    key_set = {k.lower() for k in keys}
    defined = tuple(
        replace(d.column, nullable=False) if d.column.name.lower() in key_set else d.column for d in columns
    )
    return CreateTable(table, defined, tuple(keys), collation=collation)
