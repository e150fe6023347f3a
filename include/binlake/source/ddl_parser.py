"""DDL from the binlog's query events → binlake ``SchemaChange`` events (seed 001's parser role).

A recursive-descent reader of the table statements MySQL and MariaDB write to the binlog —
``CREATE [OR REPLACE] TABLE``, ``ALTER TABLE``, ``DROP TABLE[S]``, ``RENAME TABLE[S]``,
``TRUNCATE`` — over sqlglot's tokenizer (``ddl_tokens``; column definitions in ``ddl_columns``).
Everything else — GRANT, CREATE USER (whose text may hold a password), views, indexes, ANALYZE —
is recognised by its first words and ignored without being read further or logged.

``ALTER TABLE`` is not read action by action in text order: the server resolves all of a
statement's actions against the table as it was (``CHANGE``/``MODIFY``/``DROP`` name old columns,
``FIRST``/``AFTER`` place columns in the new list, positioned columns go in after the others),
so the parser runs the same algorithm on the table's current schema and then states the
difference as ``SchemaChange`` events the sink can make one by one: drops, renames, then each
column in its new order (added, moved or retyped), then the table's default collation.

A table statement binlake cannot follow raises ``UnparsedDdlError`` — only when it concerns a
table the caller tracks: a statement about other tables changes nothing binlake keeps.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from binlake.events import (
    AddColumn,
    AlterColumnDefault,
    AlterColumnType,
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
from binlake.source.charsets import Charsets, canonical_charset, canonical_collation, charset_of
from binlake.source.ddl_columns import (
    ColumnDef,
    column_definition,
    default_text,
    default_value,
)
from binlake.source.ddl_tokens import Cursor, UnparsedDdlError, skip_option, skip_wait, tokens

__all__ = ["Charsets", "Lookup", "UnparsedDdlError", "parse_ddl"]

# sqlglot warns with the statement's text in some cases; no statement text may reach a log.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

Lookup = Callable[[TableId], CreateTable | None]

#: Words that begin a table-level item of a column list rather than a column.
_ITEM_WORDS = {"CONSTRAINT", "PRIMARY", "UNIQUE", "FOREIGN", "INDEX", "KEY", "FULLTEXT", "SPATIAL", "CHECK"}
#: ALTER TABLE options that change no column: ``WORD [=] value``.
_TABLE_OPTIONS = {
    "ENGINE", "TYPE", "AUTO_INCREMENT", "AVG_ROW_LENGTH", "CHECKSUM", "TABLE_CHECKSUM", "COMMENT",
    "COMPRESSION", "CONNECTION", "DATA", "INDEX", "DELAY_KEY_WRITE", "ENCRYPTION", "INSERT_METHOD",
    "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS", "PACK_KEYS", "PASSWORD", "ROW_FORMAT",
    "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES", "TABLESPACE", "UNION",
    "PAGE_CHECKSUM", "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "TRANSACTIONAL", "ENCRYPTED",
    "ENCRYPTION_KEY_ID", "IETF_QUOTES", "SEQUENCE", "STORAGE", "SECONDARY_ENGINE", "AUTOEXTEND_SIZE",
    "ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE", "START",
}  # fmt: skip
#: Words that begin an ALTER TABLE action.
_ACTIONS = {
    "ADD",
    "ALTER",
    "CHANGE",
    "MODIFY",
    "DROP",
    "RENAME",
    "CONVERT",
    "DEFAULT",
    "CHARACTER",
    "COLLATE",
}
#: ALTER TABLE actions that change neither columns nor rows (their arguments are skipped).
_NO_CHANGE = {
    "ALGORITHM", "LOCK", "FORCE", "ENABLE", "DISABLE", "DISCARD", "IMPORT", "ORDER", "WITH", "WITHOUT",
    "VALIDATION", "ANALYZE", "CHECK", "OPTIMIZE", "REBUILD", "REPAIR", "COALESCE", "REORGANIZE",
    "REMOVE", "PARTITION", "PARTITIONS", "SUBPARTITION", "UPGRADE", "NOWAIT", "WAIT",
}  # fmt: skip


def parse_ddl(
    statement: str,
    database: str,
    lookup: Lookup,
    charsets: Charsets | None = None,
    tracked: Callable[[TableId], bool] | None = None,
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
    """
    reader = _Reader(database, lookup, charsets or Charsets(), tracked or (lambda _t: True))
    return reader.statement(Cursor(tokens(statement)))


@dataclass
class _Slot:
    """A column of the table an ALTER builds, and which old column it comes from."""

    column: Column
    origin: str | None
    """The old column's name (lower case), None for a new column."""


@dataclass
class _Alter:
    """What one ALTER TABLE statement asks for, before the server's algorithm resolves it."""

    drops: dict[str, bool] = field(default_factory=dict)
    """old column (lower case) → IF EXISTS"""
    definitions: list[tuple[str | None, ColumnDef, tuple[str, str | None] | None, bool]] = field(
        default_factory=list
    )
    """(old name or None for ADD, definition, position, IF [NOT] EXISTS), in text order"""
    defaults: dict[str, tuple[str, object] | None] = field(default_factory=dict)
    """ALTER COLUMN c SET DEFAULT v / DROP DEFAULT: old column → the value (None: dropped)"""
    renames: list[tuple[str, str, bool]] = field(default_factory=list)
    """RENAME COLUMN old TO new: (old lower case, new, IF EXISTS)"""
    collation: str | None = None
    convert: tuple[str, str] | None = None
    new_name: TableId | None = None
    key_change: str | None = None
    rows_changed: list[tuple[TableId, str]] = field(default_factory=list)
    """Partition maintenance that changes rows without row events: (table, action)"""


class _Reader:
    def __init__(
        self, database: str, lookup: Lookup, charsets: Charsets, tracked: Callable[[TableId], bool]
    ) -> None:
        self.database = database
        self.lookup = lookup
        self.charsets = charsets
        self.tracked = tracked

    def statement(self, cur: Cursor) -> list[SchemaChange]:
        verb = cur.peek_upper()
        if verb == "CREATE":
            return self._create(cur)
        if verb == "ALTER":
            return self._alter(cur)
        if verb == "DROP":
            return self._drop(cur)
        if verb == "RENAME":
            return self._rename(cur)
        if verb == "TRUNCATE":
            cur.next()
            cur.accept("TABLE")
            return [TruncateTable(self._table(cur))]
        return []

    def _table(self, cur: Cursor) -> TableId:
        parts = cur.dotted()
        if len(parts) == 1:
            return TableId(self.database, parts[0])
        if len(parts) == 2:
            return TableId(parts[0], parts[1])
        raise UnparsedDdlError(f"not a table name: {'.'.join(parts)}")

    def _refuse(self, table: TableId, reason: str) -> list[SchemaChange]:
        if self.tracked(table):
            raise UnparsedDdlError(reason, table)
        return []

    # -- DROP, RENAME --------------------------------------------------------------------------

    def _drop(self, cur: Cursor) -> list[SchemaChange]:
        cur.next()
        if cur.accept("TEMPORARY"):
            return []  # a temporary table shadows, never drops, the table of that name
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
            return None if _selects(cur) else self._refuse(table, "CREATE TABLE without a column list")
        start = cur.at
        cur.skip_parenthesised()  # the options after the list decide the columns' charset
        charset = self._table_options(cur, self.charsets.database_default(table.database))
        if _selects(cur):
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
            and (word in _ITEM_WORDS or (word == "PERIOD" and cur.peek_upper(1) == "FOR"))
        ):
            return _key_item(cur)
        name = cur.dotted()[-1]  # t.col, db.t.col
        definition = column_definition(cur, name, charset, self.charsets)
        columns.append(definition)
        return [name] if definition.primary_key else None

    def _table_options(self, cur: Cursor, database: tuple[str, str]) -> tuple[str, str]:
        charset: str | None = None
        collation: str | None = None
        while not cur.done() and not _selects(cur):
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
                _skip_partitioning(cur)
            elif cur.peek_upper() in ("ENGINE", "TYPE") and _merge_engine(cur):
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

    # -- ALTER TABLE ---------------------------------------------------------------------------

    def _alter(self, cur: Cursor) -> list[SchemaChange]:
        cur.next()
        while cur.peek_upper() in ("ONLINE", "OFFLINE", "IGNORE"):
            cur.next()
        if not cur.accept("TABLE"):
            return []  # ALTER DATABASE, USER, VIEW, EVENT …
        if_exists = cur.accept("IF", "EXISTS")
        table = self._table(cur)
        if if_exists and self.lookup(table) is None and self.tracked(table):
            return []  # binlake knows every table it tracks: this one is not there
        try:
            return self._alter_table(cur, table)
        except UnparsedDdlError as e:
            return self._refuse(table, str(e))

    def _alter_table(self, cur: Cursor, table: TableId) -> list[SchemaChange]:
        current = self.lookup(table)
        skip_wait(cur)
        charset = _table_charset(current, self.charsets, table)
        start = cur.at
        plan = self._actions(cur, table, charset, current)
        if plan.collation is not None and plan.collation != charset[1]:
            # a new default charset applies to the columns the same statement adds or redefines
            cur.at = start
            plan = self._actions(cur, table, (charset_of(plan.collation), plan.collation), current)
        if current is None:
            return self._unknown_alter(table, plan)
        if plan.key_change is not None:
            raise UnparsedDdlError(
                f"{plan.key_change} of {table}: changing a primary key is not a schema change binlake "
                "can follow (the sink's rows are keyed by it)"
            )
        after, origins, placed = _resolve(current, plan)
        changes = _differences(current, after, origins, placed)
        changes += [PartitionRowsChanged(t, action) for t, action in plan.rows_changed]
        if plan.new_name is not None and plan.new_name != table:
            changes.append(RenameTable(table, plan.new_name))
        return changes

    def _actions(
        self, cur: Cursor, table: TableId, charset: tuple[str, str], current: CreateTable | None
    ) -> _Alter:
        plan = _Alter()
        while not cur.done():
            if cur.peek_upper() == "PARTITION" and cur.peek_upper(1) == "BY":
                _skip_partitioning(cur)
                continue
            self._action(cur, table, plan, charset, current)
            cur.accept_punct(",")  # table options may follow one another without commas
        return plan

    def _unknown_alter(self, table: TableId, plan: _Alter) -> list[SchemaChange]:
        """An ALTER of a table binlake does not know: only a rename can concern it (into the
        captured set), the rest changes nothing binlake keeps — unless binlake tracks the table."""
        touches = plan.drops or plan.definitions or plan.renames or plan.defaults or plan.convert
        if touches and self.tracked(table):
            raise UnparsedDdlError(f"ALTER TABLE {table}: binlake does not know the table's schema")
        return [RenameTable(table, plan.new_name)] if plan.new_name not in (None, table) else []

    def _action(
        self, cur: Cursor, table: TableId, plan: _Alter, charset: tuple[str, str], current: CreateTable | None
    ) -> None:
        word = cur.peek_upper()
        if word == "ADD":
            cur.next()
            self._add(cur, plan, charset)
        elif word in ("CHANGE", "MODIFY"):
            cur.next()
            cur.accept("COLUMN")
            if_exists = cur.accept("IF", "EXISTS")
            old = cur.name()
            new = cur.name() if word == "CHANGE" else old
            definition = column_definition(cur, new, charset, self.charsets)
            plan.definitions.append((old.lower(), definition, _position(cur), if_exists))
            if definition.primary_key:
                plan.key_change = f"{word} … PRIMARY KEY"
        elif word == "DROP":
            cur.next()
            self._drop_action(cur, table, plan)
        elif word == "ALTER":
            cur.next()
            self._alter_column(cur, plan)
        elif word == "RENAME":
            cur.next()
            self._rename_action(cur, plan)
        elif word in ("DEFAULT", "CHARACTER", "CHARSET", "COLLATE", "CHAR"):
            plan.collation = self._collation_option(cur, table)
        elif word == "CONVERT":
            cur.next()
            if cur.accept("TO"):
                cur.accept("CHARACTER", "SET") or cur.accept("CHARSET")
                name = cur.name().lower()
                collation = None
                if cur.accept("COLLATE"):
                    cur.accept_punct("=")
                    collation = canonical_collation(cur.name())
                if name == "default":
                    plan.convert = _table_charset(None, self.charsets, TableId(self.database, ""))
                else:
                    cs = canonical_charset(name)
                    plan.convert = (cs, collation or self.charsets.collation_of(cs))
                plan.collation = plan.convert[1]
            else:
                cur.skip_item()  # CONVERT PARTITION/TABLE (MariaDB): moves rows between tables
                raise UnparsedDdlError("CONVERT PARTITION moves rows between tables without row events")
        elif word == "UNION" or (word in ("ENGINE", "TYPE") and _merge_engine(cur)):
            raise UnparsedDdlError("a MERGE table holds no rows of its own: capture its underlying tables")
        elif word in _TABLE_OPTIONS:
            skip_option(cur)
        elif word == "TRUNCATE":
            _skip_partition_list(cur)
            plan.rows_changed.append((table, "TRUNCATE PARTITION"))
        elif word == "EXCHANGE":  # EXCHANGE PARTITION p WITH TABLE t2: rows swap between the two
            cur.accept("EXCHANGE", "PARTITION")
            cur.name()
            cur.accept("WITH", "TABLE")
            plan.rows_changed += [(table, "EXCHANGE PARTITION"), (self._table(cur), "EXCHANGE PARTITION")]
            cur.skip_item()
        elif word == "ORDER":
            _skip_order_by(cur)
        elif word in _NO_CHANGE:
            _skip_partition_list(cur)
        else:
            tok = cur.peek()
            raise UnparsedDdlError(f"`{tok.text if tok else ''}` is not an ALTER TABLE action binlake reads")

    def _add(self, cur: Cursor, plan: _Alter, charset: tuple[str, str]) -> None:
        word = cur.peek_upper()
        if word in ("PRIMARY",) or (word == "CONSTRAINT" and _declares_primary(cur)):
            plan.key_change = "ADD PRIMARY KEY"
            cur.skip_item()
            return
        if word in _ITEM_WORDS or word in ("PERIOD", "SYSTEM"):
            cur.skip_item()
            return
        if word in ("PARTITION", "PARTITIONS"):
            cur.skip_item()
            return
        cur.accept("COLUMN")
        if_not_exists = cur.accept("IF", "NOT", "EXISTS")
        if cur.accept_punct("("):
            while True:
                if cur.peek_upper() in _ITEM_WORDS:
                    if cur.peek_upper() == "PRIMARY" or (
                        cur.peek_upper() == "CONSTRAINT" and _declares_primary(cur)
                    ):
                        plan.key_change = "ADD PRIMARY KEY"
                    cur.skip_item()
                else:
                    self._add_column(cur, plan, charset, if_not_exists, positioned=False)
                if cur.accept_punct(")"):
                    return
                cur.expect_punct(",")
        self._add_column(cur, plan, charset, if_not_exists, positioned=True)

    def _add_column(
        self, cur: Cursor, plan: _Alter, charset: tuple[str, str], if_not_exists: bool, positioned: bool
    ) -> None:
        name = cur.dotted()[-1]
        definition = column_definition(cur, name, charset, self.charsets)
        position = _position(cur) if positioned else None
        plan.definitions.append((None, definition, position, if_not_exists))
        if definition.primary_key:
            plan.key_change = "ADD … PRIMARY KEY"

    def _drop_action(self, cur: Cursor, table: TableId, plan: _Alter) -> None:
        word = cur.peek_upper()
        if word == "PRIMARY":
            plan.key_change = "DROP PRIMARY KEY"
            cur.skip_item()
        elif word == "PARTITION":
            _skip_partition_list(cur)
            plan.rows_changed.append((table, "DROP PARTITION"))
        elif word in ("INDEX", "KEY", "FOREIGN", "CONSTRAINT", "CHECK", "PERIOD", "SYSTEM", "UNIQUE"):
            cur.skip_item()
        else:
            cur.accept("COLUMN")
            if_exists = cur.accept("IF", "EXISTS")
            name = cur.dotted()[-1]  # DROP t.col
            cur.accept("RESTRICT") or cur.accept("CASCADE")
            plan.drops[name.lower()] = if_exists

    def _alter_column(self, cur: Cursor, plan: _Alter) -> None:
        if cur.peek_upper() in ("INDEX", "KEY", "CHECK", "CONSTRAINT"):
            cur.skip_item()
            return
        cur.accept("COLUMN")
        cur.accept("IF", "EXISTS")
        name = cur.name().lower()
        if cur.accept("SET", "DEFAULT"):
            plan.defaults[name] = default_value(cur)
        elif cur.accept("DROP", "DEFAULT"):
            plan.defaults[name] = None
        else:
            cur.skip_item()  # SET VISIBLE / INVISIBLE

    def _rename_action(self, cur: Cursor, plan: _Alter) -> None:
        if cur.accept("COLUMN"):
            if_exists = cur.accept("IF", "EXISTS")
            old = cur.name()
            cur.accept("TO")
            plan.renames.append((old.lower(), cur.name(), if_exists))
        elif cur.peek_upper() in ("INDEX", "KEY"):
            cur.skip_item()
        else:
            cur.accept("TO") or cur.accept("AS")
            plan.new_name = self._table(cur)

    def _collation_option(self, cur: Cursor, table: TableId) -> str:
        cur.accept("DEFAULT")
        charset: str | None = None
        collation: str | None = None
        while cur.peek_upper() in ("CHARACTER", "CHARSET", "CHAR", "COLLATE", "DEFAULT"):
            if cur.accept("DEFAULT"):
                continue
            if cur.accept("COLLATE"):
                cur.accept_punct("=")
                collation = canonical_collation(cur.name())
            else:
                cur.next()
                cur.accept("SET")
                cur.accept_punct("=")
                charset = canonical_charset(cur.name())
        database = self.charsets.database_default(table.database)
        if collation == "default" or (collation is None and charset in (None, "default")):
            return database[1]  # [DEFAULT] CHARACTER SET / COLLATE = DEFAULT: the database's
        if collation is None:
            assert charset is not None
            collation = database[1] if charset == database[0] else self.charsets.collation_of(charset)
        return collation


# -- the server's ALTER algorithm ----------------------------------------------------------------


def _resolve(current: CreateTable, plan: _Alter) -> tuple[CreateTable, list[str | None], set[str]]:
    """The table after ``plan`` as the server builds it (MySQL's ``mysql_prepare_alter_table``),
    where each of its columns comes from (an old column's lower-case name, None: added), and the
    old columns the statement placed (FIRST/AFTER)."""
    old_names = {c.name.lower() for c in current.columns}
    for name, if_exists in plan.drops.items():
        if name not in old_names and not if_exists:
            raise UnparsedDdlError(f"DROP COLUMN `{name}`: {current.table} has no such column")
    in_place: dict[str, Column] = {}
    moved: set[str] = set()
    for old, definition, position, if_flag in plan.definitions:
        if old is not None and old not in old_names and not if_flag:
            raise UnparsedDdlError(f"CHANGE/MODIFY `{old}`: {current.table} has no such column")
        if old is not None and old in old_names:
            if position is None:
                in_place[old] = definition.column
            else:
                moved.add(old)
    for old, _new, if_exists in plan.renames:
        if old not in old_names and not if_exists:
            raise UnparsedDdlError(f"RENAME COLUMN `{old}`: {current.table} has no such column")
    renames = {old: new for old, new, _ in plan.renames}
    slots: list[_Slot] = []
    for column in current.columns:
        key = column.name.lower()
        if key in plan.drops or key in moved:
            continue
        if key in in_place:
            slots.append(_Slot(in_place[key], key))
            continue
        column = _with_default(column, plan.defaults, key)
        if key in renames:
            column = replace(column, name=renames[key])
        if plan.convert is not None:
            column = _converted(column, plan.convert)
        slots.append(_Slot(column, key))
    for old, definition, position, if_flag in plan.definitions:  # the rest, in text order
        if old is None:
            name = definition.column.name.lower()
            if any(s.column.name.lower() == name for s in slots):
                if if_flag:
                    continue  # ADD COLUMN IF NOT EXISTS of a column that exists
                # The server refuses a duplicate column: the schema binlake holds is out of step.
                added = definition.column.name
                raise UnparsedDdlError(f"ADD COLUMN `{added}`: {current.table} has it already")
            _place(slots, _Slot(definition.column, None), position, current.table)
        elif old in old_names and position is not None and old not in plan.drops:
            _place(slots, _Slot(definition.column, old), position, current.table)
    keys = _keys(current, slots)
    columns = tuple(replace(s.column, nullable=False) if s.column.name in keys else s.column for s in slots)
    after = CreateTable(
        current.table, columns, tuple(keys), current.comment, plan.collation or current.collation
    )
    return after, [s.origin for s in slots], moved


def _place(slots: list[_Slot], slot: _Slot, position: tuple[str, str | None] | None, table: TableId) -> None:
    if position is None:
        slots.append(slot)
    elif position[0] == "first":
        slots.insert(0, slot)
    else:
        names = [s.column.name.lower() for s in slots]
        target = (position[1] or "").lower()
        if target not in names:
            raise UnparsedDdlError(f"AFTER `{position[1]}`: {table} has no such column")
        slots.insert(names.index(target) + 1, slot)


def _keys(current: CreateTable, slots: list[_Slot]) -> list[str]:
    """The primary key after the ALTER: a dropped column leaves the key, a renamed one is renamed."""
    by_origin = {s.origin: s.column.name for s in slots if s.origin is not None}
    return [by_origin[k.lower()] for k in current.primary_key if k.lower() in by_origin]


def _with_default(column: Column, defaults: dict[str, tuple[str, object] | None], key: str) -> Column:
    if key not in defaults:
        return column
    return replace(column, default=default_text(column, defaults[key]))


def _converted(column: Column, to: tuple[str, str]) -> Column:
    """A column after ``CONVERT TO CHARACTER SET`` (binary columns stay as they are)."""
    if column.collation is None or column.data_type == "json":
        return column
    return replace(column, charset=to[0], collation=to[1])


def _differences(
    before: CreateTable, after: CreateTable, origins: list[str | None], placed: set[str]
) -> list[SchemaChange]:
    """``after`` as changes the sink makes one by one from ``before`` (drops, renames, then each
    column in its new order: added, moved or redefined; then the default collation)."""
    table = before.table
    changes: list[SchemaChange] = []
    new_by_origin = {o: c for o, c in zip(origins, after.columns, strict=True) if o is not None}
    for column in before.columns:
        if column.name.lower() not in new_by_origin:
            changes.append(DropColumn(table, column.name))
    working = [c.name for c in before.columns if c.name.lower() in new_by_origin]
    for old, new in new_by_origin.items():
        old_name = next(c.name for c in before.columns if c.name.lower() == old)
        if new.name != old_name:
            changes.append(RenameColumn(table, old_name, new.name))
            working[working.index(old_name)] = new.name
    origin_of = {c.name: o for o, c in new_by_origin.items()}
    old_index = {c.name.lower(): i for i, c in enumerate(before.columns)}
    steady = _steady(
        [
            old_index[origin_of[c.name]] if c.name in origin_of and origin_of[c.name] not in placed else None
            for c in after.columns
        ]
    )
    previous: str | None = None
    for i, column in enumerate(after.columns):
        origin = origin_of.get(column.name)
        if origin is None:
            changes.append(_add(table, column, previous, working))
        else:
            old_column = before.columns[old_index[origin]]
            moved = i not in steady
            if moved:
                working.remove(column.name)
                working.insert(0 if previous is None else working.index(previous) + 1, column.name)
            if moved:
                where = ("first", None) if previous is None else ("after", previous)
                changes.append(AlterColumnType(table, column, *where))
            elif _redefined(old_column, column):
                changes.append(AlterColumnType(table, column))
            elif old_column != replace(column, name=old_column.name):
                changes.append(AlterColumnDefault(table, column))
        previous = column.name
    if after.collation != before.collation and after.collation is not None:
        changes.append(AlterTableCollation(table, after.collation))
    return changes


def _add(table: TableId, column: Column, previous: str | None, working: list[str]) -> AddColumn:
    if previous is None:
        working.insert(0, column.name)
        return AddColumn(table, column, "first")
    at = working.index(previous) + 1
    working.insert(at, column.name)
    if at == len(working) - 1:
        return AddColumn(table, column)
    return AddColumn(table, column, "after", previous)


def _steady(old_positions: list[int | None]) -> set[int]:
    """Indexes (in the new order) of the carried columns that need not move: a longest run of
    carried columns whose old positions increase (the rest are moved into place)."""
    runs: list[tuple[int, list[int]]] = []  # (old position of the run's last column, indexes)
    for i, position in enumerate(old_positions):
        if position is None:
            continue
        longest: list[int] = []
        for last, run in runs:
            if last < position and len(run) > len(longest):
                longest = run
        runs.append((position, [*longest, i]))
    best: list[int] = []
    for _, run in runs:
        best = run if len(run) > len(best) else best
    return set(best)


def _redefined(a: Column, b: Column) -> bool:
    """Whether more than the default (or AUTO_INCREMENT) differs."""
    return replace(a, name=b.name, default=None, auto_increment=False) != replace(
        b, default=None, auto_increment=False
    )


def _created(table: TableId, columns: list[ColumnDef], keys: list[str], collation: str) -> CreateTable:
    names = {d.column.name.lower(): d.column.name for d in columns}
    keys = [names.get(k.lower(), k) for k in keys]  # PRIMARY KEY (ID) for a column `id`
    key_set = {k.lower() for k in keys}
    defined = tuple(
        replace(d.column, nullable=False) if d.column.name.lower() in key_set else d.column for d in columns
    )
    return CreateTable(table, defined, tuple(keys), collation=collation)


def _table_charset(current: CreateTable | None, charsets: Charsets, table: TableId) -> tuple[str, str]:
    if current is not None and current.collation:
        return charset_of(current.collation), current.collation
    return charsets.database_default(table.database)


def _position(cur: Cursor) -> tuple[str, str | None] | None:
    if cur.accept("FIRST"):
        return ("first", None)
    if cur.accept("AFTER"):
        return ("after", cur.name())
    return None


def _key_item(cur: Cursor) -> list[str] | None:
    """A table-level key or constraint; the columns of a PRIMARY KEY."""
    primary = _declares_primary(cur)
    if not primary:
        cur.skip_item()
        return None
    while not cur.is_punct("("):
        cur.next()
    cur.next()
    names: list[str] = []
    while True:
        names.append(cur.name())
        while not cur.is_punct(",") and not cur.is_punct(")"):
            if cur.is_punct("("):
                cur.skip_parenthesised()
            else:
                cur.next()
        if cur.accept_punct(")"):
            break
        cur.expect_punct(",")
    cur.skip_item()
    return names


def _declares_primary(cur: Cursor) -> bool:
    """Whether the item at ``cur`` is ``[CONSTRAINT [name]] PRIMARY KEY``."""
    ahead = 0
    if cur.peek_upper() == "CONSTRAINT":
        ahead = 1 if cur.peek_upper(1) in ("PRIMARY", "UNIQUE", "FOREIGN", "CHECK") else 2
    return cur.peek_upper(ahead) == "PRIMARY"


def _selects(cur: Cursor) -> bool:
    """Whether a SELECT follows (``CREATE TABLE … [IGNORE|REPLACE] [AS] SELECT``)."""
    ahead = 0
    while cur.peek_upper(ahead) in ("IGNORE", "REPLACE", "AS") or cur.is_punct("(", ahead):
        ahead += 1
    return cur.peek_upper(ahead) in ("SELECT", "WITH", "VALUES", "TABLE")


def _merge_engine(cur: Cursor) -> bool:
    ahead = 2 if cur.is_punct("=", 1) else 1
    return cur.peek_upper(ahead) in ("MERGE", "MRG_MYISAM")


def _skip_partitioning(cur: Cursor) -> None:
    """``PARTITION BY …`` to the statement's end (it changes no column)."""
    while not cur.done() and not _selects(cur):
        if cur.is_punct("("):
            cur.skip_parenthesised()
        else:
            cur.next()


def _skip_partition_list(cur: Cursor) -> None:
    """An action and the partition names it lists (``DROP PARTITION p0, p1``): a comma followed by
    a word that begins no action continues the list."""
    cur.skip_item()
    while cur.is_punct(",") and (tok := cur.peek(1)) is not None and tok.is_name:
        if tok.kind == "word" and tok.upper in _ACTIONS | _TABLE_OPTIONS | _NO_CHANGE | {
            "TRUNCATE",
            "EXCHANGE",
        }:
            return
        cur.next()
        cur.skip_item()


def _skip_order_by(cur: Cursor) -> None:
    """``ORDER BY a, t.b DESC``: its commas separate columns, not actions."""
    cur.accept("ORDER", "BY")
    while True:
        cur.dotted()
        cur.accept("ASC") or cur.accept("DESC")
        if not (cur.is_punct(",") and cur.peek(1) is not None and cur.peek_upper(1) not in _ACTIONS):
            return
        cur.next()
