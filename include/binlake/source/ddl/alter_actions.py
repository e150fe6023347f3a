"""``ALTER TABLE``'s action list read into an ``AlterPlan`` (``alter`` resolves it the
server's way and states the result as changes)."""

from __future__ import annotations

from binlake.events import (
    AlterPrimaryKey,
    CreateTable,
    PartitionRowsChanged,
    RenameTable,
    SchemaChange,
    TableId,
)
from binlake.source.ddl.alter import AlterPlan, differences, key_changed, resolve
from binlake.source.ddl.clauses import (
    ITEM_WORDS,
    NO_CHANGE,
    TABLE_OPTIONS,
    VERSIONED,
    DdlScope,
    column_position,
    declares_primary,
    key_item,
    merge_engine,
    skip_order_by,
    skip_partition_list,
    skip_partitioning,
    table_charset,
)
from binlake.source.ddl.column_defaults import default_value
from binlake.source.ddl.columns import column_definition
from binlake.source.ddl.tokens import Cursor, UnparsedDdlError, skip_option, skip_wait
from binlake.source.server.charsets import canonical_charset, canonical_collation, charset_of


class AlterReader(DdlScope):
    """Reads one ``ALTER TABLE`` statement (``read``) into the changes it makes."""

    def read(self, cur: Cursor) -> list[SchemaChange]:
        cur.next()
        ignore = False
        while cur.peek_upper() in ("ONLINE", "OFFLINE", "IGNORE"):
            ignore = ignore or cur.peek_upper() == "IGNORE"
            cur.next()
        if not cur.accept("TABLE"):
            return []  # ALTER DATABASE, USER, VIEW, EVENT …
        if_exists = cur.accept("IF", "EXISTS")
        table = self._table(cur)
        if if_exists and self.lookup(table) is None and self.tracked(table):
            return []  # binlake knows every table it tracks: this one is not there
        try:
            return self._alter_table(cur, table, ignore)
        except UnparsedDdlError as e:
            return self._refuse(table, str(e))

    def _alter_table(self, cur: Cursor, table: TableId, ignore: bool = False) -> list[SchemaChange]:
        current = self.lookup(table)
        skip_wait(cur)
        charset = table_charset(current, self.charsets, table)
        start = cur.at
        plan = self._actions(cur, table, charset, current)
        if plan.collation is not None and plan.collation != charset[1]:
            # a new default charset applies to the columns the same statement adds or redefines
            cur.at = start
            plan = self._actions(cur, table, (charset_of(plan.collation), plan.collation), current)
        if current is None:
            return self._unknown_alter(table, plan)
        after, origins, placed = resolve(current, plan)
        changes = differences(current, after, origins, placed)
        if key_changed(current, after, origins):
            changes.append(AlterPrimaryKey(table, after.primary_key))
        if ignore and plan.unique_added:  # duplicates deleted by the server, no row event says which
            plan.rows_changed.append((table, "ALTER IGNORE … ADD UNIQUE"))
        changes += [PartitionRowsChanged(t, action) for t, action in plan.rows_changed]
        if plan.new_name is not None and plan.new_name != table:
            changes.append(RenameTable(table, plan.new_name))
        return changes

    def _actions(
        self, cur: Cursor, table: TableId, charset: tuple[str, str], current: CreateTable | None
    ) -> AlterPlan:
        plan = AlterPlan()
        while not cur.done():
            if cur.peek_upper() == "PARTITION" and cur.peek_upper(1) == "BY":
                skip_partitioning(cur)
                continue
            self._action(cur, table, plan, charset, current)
            cur.accept_punct(",")  # table options may follow one another without commas
        return plan

    def _unknown_alter(self, table: TableId, plan: AlterPlan) -> list[SchemaChange]:
        """An ALTER of a table binlake does not know: only a rename can concern it (into the
        captured set), the rest changes nothing binlake keeps — unless binlake tracks the table."""
        touches = plan.drops or plan.definitions or plan.renames or plan.defaults or plan.convert
        if touches and self.tracked(table):
            raise UnparsedDdlError(f"ALTER TABLE {table}: binlake does not know the table's schema")
        return [RenameTable(table, plan.new_name)] if plan.new_name not in (None, table) else []

    def _action(
        self,
        cur: Cursor,
        table: TableId,
        plan: AlterPlan,
        charset: tuple[str, str],
        current: CreateTable | None,
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
            plan.definitions.append((old.lower(), definition, column_position(cur), if_exists))
            if definition.primary_key:
                plan.new_key = [new]
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
                    plan.convert = table_charset(None, self.charsets, TableId(self.database, ""))
                else:
                    cs = canonical_charset(name)
                    plan.convert = (cs, collation or self.charsets.collation_of(cs))
                plan.collation = plan.convert[1]
            else:
                cur.skip_item()  # CONVERT PARTITION/TABLE (MariaDB): moves rows between tables
                raise UnparsedDdlError("CONVERT PARTITION moves rows between tables without row events")
        elif word == "UNION" or (word in ("ENGINE", "TYPE") and merge_engine(cur)):
            raise UnparsedDdlError("a MERGE table holds no rows of its own: capture its underlying tables")
        elif word in TABLE_OPTIONS:
            skip_option(cur)
        elif word == "TRUNCATE":
            skip_partition_list(cur)
            plan.rows_changed.append((table, "TRUNCATE PARTITION"))
        elif word == "EXCHANGE":  # EXCHANGE PARTITION p WITH TABLE t2: rows swap between the two
            cur.accept("EXCHANGE", "PARTITION")
            cur.name()
            cur.accept("WITH", "TABLE")
            plan.rows_changed += [(table, "EXCHANGE PARTITION"), (self._table(cur), "EXCHANGE PARTITION")]
            cur.skip_item()
        elif word == "ORDER":
            skip_order_by(cur)
        elif word == "IMPORT":  # IMPORT [PARTITION p] TABLESPACE: the rows of a copied .ibd file
            skip_partition_list(cur)
            plan.rows_changed.append((table, "IMPORT TABLESPACE"))
        elif word in NO_CHANGE:
            skip_partition_list(cur)
        else:
            tok = cur.peek()
            raise UnparsedDdlError(f"`{tok.text if tok else ''}` is not an ALTER TABLE action binlake reads")

    def _add(self, cur: Cursor, plan: AlterPlan, charset: tuple[str, str]) -> None:
        word = cur.peek_upper()
        plan.unique_added = plan.unique_added or _adds_unique(cur)
        if word in ("PRIMARY",) or (word == "CONSTRAINT" and declares_primary(cur)):
            plan.new_key = key_item(cur)
            return
        if word == "SYSTEM":
            raise UnparsedDdlError(VERSIONED)
        if word in ITEM_WORDS or word == "PERIOD":
            cur.skip_item()
            return
        if word in ("PARTITION", "PARTITIONS"):
            cur.skip_item()
            return
        cur.accept("COLUMN")
        if_not_exists = cur.accept("IF", "NOT", "EXISTS")
        if cur.accept_punct("("):
            while True:
                if cur.peek_upper() in ITEM_WORDS:
                    plan.unique_added = plan.unique_added or _adds_unique(cur)
                    keys = key_item(cur)  # None: another kind of key
                    if keys is not None:
                        plan.new_key = keys
                else:
                    self._add_column(cur, plan, charset, if_not_exists, positioned=False)
                if cur.accept_punct(")"):
                    return
                cur.expect_punct(",")
        self._add_column(cur, plan, charset, if_not_exists, positioned=True)

    def _add_column(
        self, cur: Cursor, plan: AlterPlan, charset: tuple[str, str], if_not_exists: bool, positioned: bool
    ) -> None:
        name = cur.dotted()[-1]
        definition = column_definition(cur, name, charset, self.charsets)
        position = column_position(cur) if positioned else None
        plan.definitions.append((None, definition, position, if_not_exists))
        if definition.primary_key:
            plan.new_key = [name]

    def _drop_action(self, cur: Cursor, table: TableId, plan: AlterPlan) -> None:
        word = cur.peek_upper()
        if word == "PRIMARY":
            plan.drop_key = True
            cur.skip_item()
        elif word == "PARTITION":
            skip_partition_list(cur)
            plan.rows_changed.append((table, "DROP PARTITION"))
        elif word in ("INDEX", "KEY", "FOREIGN", "CONSTRAINT", "CHECK", "PERIOD", "SYSTEM", "UNIQUE"):
            cur.skip_item()
        else:
            cur.accept("COLUMN")
            if_exists = cur.accept("IF", "EXISTS")
            name = cur.dotted()[-1]  # DROP t.col
            cur.accept("RESTRICT") or cur.accept("CASCADE")
            plan.drops[name.lower()] = if_exists

    def _alter_column(self, cur: Cursor, plan: AlterPlan) -> None:
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

    def _rename_action(self, cur: Cursor, plan: AlterPlan) -> None:
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


def _adds_unique(cur: Cursor) -> bool:
    """Whether the item at ``cur`` (after ``ADD``) is a UNIQUE or PRIMARY key (``CONSTRAINT [c]`` first)."""
    words = [cur.peek_upper(i) for i in range(3)]
    if words[0] == "CONSTRAINT":
        return any(w in ("PRIMARY", "UNIQUE") for w in words[1:])
    return words[0] in ("PRIMARY", "UNIQUE")
