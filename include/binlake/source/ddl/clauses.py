"""The grammar the DDL parser shares between its statements: the scope a statement is read in
(default database, the schemas binlake holds, charsets, which tables matter), the words that begin
items, actions and options, and the clauses it reads or skips whole — column positions, key items,
partitioning, ``ORDER BY``.
"""

from __future__ import annotations

from collections.abc import Callable

from binlake.events import CreateTable, SchemaChange, TableId
from binlake.source.ddl.tokens import Cursor, UnparsedDdlError
from binlake.source.server.charsets import Charsets, charset_of

#: The schema binlake holds for a table (None: it holds none).
Lookup = Callable[[TableId], CreateTable | None]

#: Words that begin a table-level item of a column list rather than a column.
ITEM_WORDS = {"CONSTRAINT", "PRIMARY", "UNIQUE", "FOREIGN", "INDEX", "KEY", "FULLTEXT", "SPATIAL", "CHECK"}

#: ALTER TABLE options that change no column: ``WORD [=] value``.
TABLE_OPTIONS = {
    "ENGINE", "TYPE", "AUTO_INCREMENT", "AVG_ROW_LENGTH", "CHECKSUM", "TABLE_CHECKSUM", "COMMENT",
    "COMPRESSION", "CONNECTION", "DATA", "INDEX", "DELAY_KEY_WRITE", "ENCRYPTION", "INSERT_METHOD",
    "KEY_BLOCK_SIZE", "MAX_ROWS", "MIN_ROWS", "PACK_KEYS", "PASSWORD", "ROW_FORMAT",
    "STATS_AUTO_RECALC", "STATS_PERSISTENT", "STATS_SAMPLE_PAGES", "TABLESPACE", "UNION",
    "PAGE_CHECKSUM", "PAGE_COMPRESSED", "PAGE_COMPRESSION_LEVEL", "TRANSACTIONAL", "ENCRYPTED",
    "ENCRYPTION_KEY_ID", "IETF_QUOTES", "SEQUENCE", "STORAGE", "SECONDARY_ENGINE", "AUTOEXTEND_SIZE",
    "ENGINE_ATTRIBUTE", "SECONDARY_ENGINE_ATTRIBUTE", "START",
}  # fmt: skip

#: Words that begin an ALTER TABLE action.
ACTIONS = {
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

#: Why binlake refuses a table made system-versioned (MariaDB's ``WITH SYSTEM VERSIONING``).
VERSIONED = (
    "a system-versioned table keeps its rows' old versions in it beside the current ones (the binlog "
    "writes both), which binlake does not capture as the table is: exclude it (`source.tables_exclude`)"
)

#: ALTER TABLE actions that change neither columns nor rows (their arguments are skipped).
NO_CHANGE = {
    "ALGORITHM", "LOCK", "FORCE", "ENABLE", "DISABLE", "DISCARD", "IMPORT", "ORDER", "WITH", "WITHOUT",
    "VALIDATION", "ANALYZE", "CHECK", "OPTIMIZE", "REBUILD", "REPAIR", "COALESCE", "REORGANIZE",
    "REMOVE", "PARTITION", "PARTITIONS", "SUBPARTITION", "UPGRADE", "NOWAIT", "WAIT",
}  # fmt: skip


class DdlScope:
    """What a statement is read against: unqualified names belong to ``database``; ``lookup``
    gives the schemas binlake holds; a statement it cannot follow is refused only for the tables
    ``tracked`` says binlake keeps."""

    def __init__(
        self, database: str, lookup: Lookup, charsets: Charsets, tracked: Callable[[TableId], bool]
    ) -> None:
        self.database = database
        self.lookup = lookup
        self.charsets = charsets
        self.tracked = tracked

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


def table_charset(current: CreateTable | None, charsets: Charsets, table: TableId) -> tuple[str, str]:
    if current is not None and current.collation:
        return charset_of(current.collation), current.collation
    return charsets.database_default(table.database)


def column_position(cur: Cursor) -> tuple[str, str | None] | None:
    if cur.accept("FIRST"):
        return ("first", None)
    if cur.accept("AFTER"):
        return ("after", cur.name())
    return None


def key_item(cur: Cursor) -> list[str] | None:
    """A table-level key or constraint; the columns of a PRIMARY KEY."""
    primary = declares_primary(cur)
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


def declares_primary(cur: Cursor) -> bool:
    """Whether the item at ``cur`` is ``[CONSTRAINT [name]] PRIMARY KEY``."""
    ahead = 0
    if cur.peek_upper() == "CONSTRAINT":
        ahead = 1 if cur.peek_upper(1) in ("PRIMARY", "UNIQUE", "FOREIGN", "CHECK") else 2
    return cur.peek_upper(ahead) == "PRIMARY"


def selects(cur: Cursor) -> bool:
    """Whether a SELECT follows (``CREATE TABLE … [IGNORE|REPLACE] [AS] SELECT``)."""
    ahead = 0
    while cur.peek_upper(ahead) in ("IGNORE", "REPLACE", "AS") or cur.is_punct("(", ahead):
        ahead += 1
    return cur.peek_upper(ahead) in ("SELECT", "WITH", "VALUES", "TABLE")


def merge_engine(cur: Cursor) -> bool:
    ahead = 2 if cur.is_punct("=", 1) else 1
    return cur.peek_upper(ahead) in ("MERGE", "MRG_MYISAM")


def skip_partitioning(cur: Cursor) -> None:
    """``PARTITION BY …`` to the statement's end (it changes no column)."""
    while not cur.done() and not selects(cur):
        if cur.is_punct("("):
            cur.skip_parenthesised()
        else:
            cur.next()


def skip_partition_list(cur: Cursor) -> None:
    """An action and the partition names it lists (``DROP PARTITION p0, p1``): a comma followed by
    a word that begins no action continues the list."""
    cur.skip_item()
    while cur.is_punct(",") and (tok := cur.peek(1)) is not None and tok.is_name:
        if tok.kind == "word" and tok.upper in ACTIONS | TABLE_OPTIONS | NO_CHANGE | {
            "TRUNCATE",
            "EXCHANGE",
        }:
            return
        cur.next()
        cur.skip_item()


def skip_order_by(cur: Cursor) -> None:
    """``ORDER BY a, t.b DESC``: its commas separate columns, not actions."""
    cur.accept("ORDER", "BY")
    while True:
        cur.dotted()
        cur.accept("ASC") or cur.accept("DESC")
        if not (cur.is_punct(",") and cur.peek(1) is not None and cur.peek_upper(1) not in ACTIONS):
            return
        cur.next()
