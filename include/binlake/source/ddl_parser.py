"""DDL from the binlog's query events → binlake ``SchemaChange`` events (seed 001's parser role).

Statements are parsed with sqlglot's MySQL dialect, never with regular expressions. Only table
statements reach the parser: the first keywords (read by sqlglot's tokenizer, so comments and
backquotes are handled) decide, and everything else — GRANT, CREATE USER (whose text may hold a
password), views, indexes, ANALYZE — is ignored without being parsed or logged.

Column types come from the statement (an ``ADD COLUMN`` is known before any row of it arrives) and
are normalised like discovery normalises ``information_schema`` (``schema.type_mapping`` needs
``data_type``, ``column_type``, precision/scale/fsp/length, the charset and ENUM/SET members).
Where the statement leaves something to the table's defaults (a text column's charset), the
table's current schema fills it in.

A table statement sqlglot cannot read raises ``UnparsedDdlError``: the caller's behaviour mode
decides what happens, it is never dropped silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

import sqlglot
from pymysql.charset import charset_by_name
from sqlglot import Token, TokenType, exp
from sqlglot.dialects.mysql import MySQL
from sqlglot.errors import ParseError, TokenError

from binlake.errors import BinlakeError
from binlake.events import (
    AddColumn,
    AlterColumnType,
    Column,
    CreateTable,
    DropColumn,
    DropTable,
    RenameColumn,
    RenameTable,
    SchemaChange,
    TableId,
    TruncateTable,
)

# sqlglot warns with the statement's text when it falls back to a generic command; binlake reports
# unparsed table DDL itself, with its position, and no other statement text may reach a log.
logging.getLogger("sqlglot").setLevel(logging.ERROR)

Lookup = Callable[[TableId], CreateTable | None]

_DIALECT = MySQL()
_GEOMETRY = {
    "POINT", "LINESTRING", "POLYGON", "MULTIPOINT", "MULTILINESTRING", "MULTIPOLYGON",
    "GEOMETRYCOLLECTION", "GEOMCOLLECTION",
}  # fmt: skip
# (data_type, information_schema precision, MariaDB display width signed/unsigned)
_INTEGERS: dict[Any, tuple[str, int, int, bool]] = {
    exp.DataType.Type.TINYINT: ("tinyint", 3, 4, False),
    exp.DataType.Type.UTINYINT: ("tinyint", 3, 3, True),
    exp.DataType.Type.SMALLINT: ("smallint", 5, 6, False),
    exp.DataType.Type.USMALLINT: ("smallint", 5, 5, True),
    exp.DataType.Type.MEDIUMINT: ("mediumint", 7, 9, False),
    exp.DataType.Type.UMEDIUMINT: ("mediumint", 7, 8, True),
    exp.DataType.Type.INT: ("int", 10, 11, False),
    exp.DataType.Type.UINT: ("int", 10, 10, True),
    exp.DataType.Type.BIGINT: ("bigint", 19, 20, False),
    exp.DataType.Type.UBIGINT: ("bigint", 20, 20, True),
}
_TEXT_LENGTHS = {"tinytext": 255, "text": 65535, "mediumtext": 16777215, "longtext": 4294967295}
_BLOB_LENGTHS = {"tinyblob": 255, "blob": 65535, "mediumblob": 16777215, "longblob": 4294967295}
_SIMPLE = {
    "float", "double", "date", "datetime", "timestamptz", "time", "year", "char", "varchar",
    "binary", "varbinary", "enum", "set", "json", "geometry", "bit", "decimal", "udecimal",
    *_TEXT_LENGTHS, *_BLOB_LENGTHS,
}  # fmt: skip


class UnparsedDdlError(BinlakeError):
    """A table statement binlake could not turn into schema changes."""


def parse_ddl(statement: str, database: str, lookup: Lookup) -> list[SchemaChange]:
    """The schema changes ``statement`` makes ([] for statements that change no table).

    Args:
        statement: the query event's text.
        database: the event's default database (unqualified names belong to it).
        lookup: a table's schema before this statement, or None if binlake does not know it.
    """
    try:
        tokens = _DIALECT.tokenize(statement)
    except TokenError as e:
        raise UnparsedDdlError(f"could not read the statement's tokens ({e})") from None
    kind = _statement_kind(tokens)
    if kind is None:
        return []
    if kind == "rename":
        return _rename_tables(tokens, database)
    if kind == "alter":
        statement = _split_parenthesised_adds(statement, tokens)
    statement, geometries = _geometry_as_generic(statement, tokens)
    try:
        tree = sqlglot.parse_one(statement, read="mysql")
    except ParseError as e:
        raise UnparsedDdlError(f"sqlglot could not parse it: {str(e).splitlines()[0]}") from None
    if isinstance(tree, exp.Command):
        raise UnparsedDdlError("sqlglot does not support this form of the statement")
    return _Converter(database, lookup, geometries).convert(tree)


def _statement_kind(tokens: list[Token]) -> str | None:
    words = [t.text.upper() for t in tokens[:8]]
    if words[:1] == ["CREATE"]:  # CREATE OR REPLACE TABLE (MariaDB)
        words = [w for w in words if w not in ("OR", "REPLACE")]
    if words[:2] == ["ALTER", "ONLINE"] or words[:2] == ["ALTER", "IGNORE"]:
        words = words[:1] + words[2:]
    if len(words) < 2:
        return None
    first, second = words[0], words[1]
    if first == "ALTER" and second == "TABLE":
        return "alter"
    if first == "CREATE" and second == "TABLE":
        return "create"
    if first == "DROP" and second == "TABLE":
        return "drop"
    if first == "TRUNCATE":
        return "truncate"
    if first == "RENAME" and (second == "TABLE" or second.startswith("TABLE ")):
        return "rename"
    return None  # CREATE TEMPORARY TABLE, DROP TEMPORARY TABLE, views, indexes, users, grants …


def _split_parenthesised_adds(statement: str, tokens: list[Token]) -> str:
    """``ADD [COLUMN] (a INT, b INT)`` → ``ADD COLUMN a INT, ADD COLUMN b INT`` (sqlglot reads the latter)."""
    edits: list[tuple[int, int, str]] = []
    i = 0
    while i < len(tokens):
        if tokens[i].text.upper() == "ADD":
            j = i + 1
            if j < len(tokens) and tokens[j].token_type == TokenType.COLUMN:
                j += 1
            if j < len(tokens) and tokens[j].token_type == TokenType.L_PAREN:
                end, parts = _top_level_parts(tokens, j)
                text = ", ".join(
                    "ADD COLUMN " + statement[tokens[a].start : tokens[b].end + 1] for a, b in parts
                )
                edits.append((tokens[i].start, tokens[end].end + 1, text))
                i = end
        i += 1
    for start, end, text in reversed(edits):
        statement = statement[:start] + text + statement[end:]
    return statement


def _top_level_parts(tokens: list[Token], open_at: int) -> tuple[int, list[tuple[int, int]]]:
    """Index of the matching ``)`` and the (first, last) token of each comma-separated part."""
    depth, parts, first = 0, [], open_at + 1
    for k in range(open_at, len(tokens)):
        kind = tokens[k].token_type
        if kind == TokenType.L_PAREN:
            depth += 1
        elif kind == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                parts.append((first, k - 1))
                return k, parts
        elif kind == TokenType.COMMA and depth == 1:
            parts.append((first, k - 1))
            first = k + 1
    raise UnparsedDdlError("unbalanced parentheses")


def _geometry_as_generic(statement: str, tokens: list[Token]) -> tuple[str, list[str]]:
    """sqlglot knows GEOMETRY but not its subtypes: read them as GEOMETRY, keep their names in order."""
    names: list[str] = []
    for token in reversed(tokens):
        if token.token_type != TokenType.STRING and token.text.upper() in _GEOMETRY:
            statement = statement[: token.start] + "GEOMETRY" + statement[token.end + 1 :]
            names.insert(0, token.text.lower())
        elif token.text.upper() == "GEOMETRY":
            names.insert(0, "geometry")
    return statement, names


def _rename_tables(tokens: list[Token], database: str) -> list[SchemaChange]:
    """``RENAME TABLE a TO b, c TO d`` (sqlglot reads it only as a generic command)."""
    changes: list[SchemaChange] = []
    names: list[list[str]] = [[]]
    # MySQL's tokenizer keeps everything after RENAME as one string: read that again.
    rest = tokens[2:] if tokens[1].text.upper() == "TABLE" else _DIALECT.tokenize(tokens[1].text)[1:]
    for token in rest:
        if token.token_type == TokenType.COMMA:
            names.append([])
        elif token.token_type != TokenType.DOT:
            names[-1].append(token.text)
    for words in names:
        if "TO" not in [w.upper() for w in words]:
            raise UnparsedDdlError("RENAME TABLE without TO")
        at = [w.upper() for w in words].index("TO")
        changes.append(RenameTable(_qualified(words[:at], database), _qualified(words[at + 1 :], database)))
    return changes


def _qualified(parts: list[str], database: str) -> TableId:
    if len(parts) == 1:
        return TableId(database, parts[0])
    if len(parts) == 2:
        return TableId(parts[0], parts[1])
    raise UnparsedDdlError(f"not a table name: {'.'.join(parts)}")


class _Converter:
    def __init__(self, database: str, lookup: Lookup, geometries: list[str]) -> None:
        self.database = database
        self.lookup = lookup
        self.geometries = geometries

    def column(self, definition: exp.ColumnDef, charset: str, collation: str) -> Column:
        column = _column(definition, charset, collation)
        if column.data_type == "geometry" and self.geometries:
            name = self.geometries.pop(0)
            column = replace(column, data_type=name, column_type=name)
        return column

    def convert(self, tree: exp.Expr) -> list[SchemaChange]:
        if isinstance(tree, exp.Alter):
            return self._alter(tree)
        if isinstance(tree, exp.Create):
            return self._create(tree)
        if isinstance(tree, exp.Drop):
            if tree.args.get("temporary"):
                return []
            return [DropTable(self._table(t)) for t in tree.expressions or tree.args.get("tables") or []]
        if isinstance(tree, exp.TruncateTable):
            return [TruncateTable(self._table(t)) for t in tree.expressions]
        return []

    def _table(self, node: exp.Expression) -> TableId:
        assert isinstance(node, exp.Table)
        return TableId(node.db or self.database, node.name)

    # -- CREATE TABLE ------------------------------------------------------------------------------

    def _create(self, tree: exp.Create) -> list[SchemaChange]:
        if str(tree.args.get("kind", "")).upper() != "TABLE":
            return []
        properties = tree.args.get("properties")
        if tree.args.get("expression") is not None:
            raise UnparsedDdlError(
                "CREATE TABLE … AS SELECT: the new table's column types are not in the statement"
            )
        like = properties.find(exp.LikeProperty) if properties is not None else None
        if like is not None:
            target = tree.this if isinstance(tree.this, exp.Table) else tree.this.this
            source = self._table(like.this)
            known = self.lookup(source)
            if known is None:
                raise UnparsedDdlError(
                    f"CREATE TABLE … LIKE {source}: binlake does not know {source}'s schema"
                )
            return [replace(known, table=self._table(target))]
        schema = tree.this
        if not isinstance(schema, exp.Schema):
            raise UnparsedDdlError("CREATE TABLE without a column list")
        table = self._table(schema.this)
        charset, collation = _table_charset(properties)
        columns: list[Column] = []
        keys: list[str] = []
        for item in schema.expressions:
            if isinstance(item, exp.ColumnDef):
                column = self.column(item, charset, collation)
                columns.append(column)
                if _has(item, exp.PrimaryKeyColumnConstraint):
                    keys = [column.name]
            elif isinstance(item, exp.PrimaryKey):
                keys = [_name(e) for e in item.expressions]
        key_set = set(keys)
        columns = [replace(c, nullable=False) if c.name in key_set else c for c in columns]
        return [CreateTable(table, tuple(columns), tuple(keys), collation=collation)]

    # -- ALTER TABLE -------------------------------------------------------------------------------

    def _alter(self, tree: exp.Alter) -> list[SchemaChange]:
        table = self._table(tree.this)
        current = self.lookup(table)
        charset, collation = _default_charset(current)
        changes: list[SchemaChange] = []
        for action in tree.args.get("actions") or []:
            changes.extend(self._action(table, action, charset, collation, current))
            if changes and isinstance(changes[-1], RenameTable):
                table = changes[-1].new_table
        return changes

    def _action(
        self,
        table: TableId,
        action: exp.Expression,
        charset: str,
        collation: str,
        current: CreateTable | None,
    ) -> Iterable[SchemaChange]:
        if isinstance(action, exp.ColumnDef):
            position = action.args.get("position")
            column = self.column(action, charset, collation)
            if position is None:
                return [AddColumn(table, column)]
            if str(position.args.get("position", "")).upper() == "FIRST":
                return [AddColumn(table, column, "first")]
            return [AddColumn(table, column, "after", _name(position.this))]
        if isinstance(action, exp.Drop) and str(action.args.get("kind", "")).upper() == "COLUMN":
            return [DropColumn(table, _name(c)) for c in action.args.get("tables") or []]
        if isinstance(action, exp.RenameColumn):
            return [RenameColumn(table, _name(action.this), _name(action.args["to"]))]
        if isinstance(action, exp.ModifyColumn):
            return self._modify(table, action, charset, collation, current)
        if isinstance(action, exp.AlterRename):
            target = action.this
            return [RenameTable(table, TableId(target.db or self.database or table.database, target.name))]
        if isinstance(action, exp.DropPrimaryKey) or (
            isinstance(action, exp.AddConstraint) and action.find(exp.PrimaryKey) is not None
        ):
            raise UnparsedDdlError("changing a primary key is not a supported schema change")
        return []  # indexes, constraints, defaults, table options: the sink's schema stays

    def _modify(
        self,
        table: TableId,
        action: exp.ModifyColumn,
        charset: str,
        collation: str,
        current: CreateTable | None,
    ) -> list[SchemaChange]:
        definition = action.this
        old = action.args.get("rename_from")
        column = self.column(definition, charset, collation)
        before = _find(current, _name(old) if old is not None else column.name)
        changes: list[SchemaChange] = []
        if old is not None and _name(old) != column.name:
            changes.append(RenameColumn(table, _name(old), column.name))
        if before is None or _type_differs(before, column):
            changes.append(AlterColumnType(table, column))
        return changes


def _has(definition: exp.ColumnDef, kind: type) -> bool:
    return any(isinstance(c.args.get("kind"), kind) for c in definition.args.get("constraints") or [])


def _constraint(definition: exp.ColumnDef, kind: type) -> Any:
    for c in definition.args.get("constraints") or []:
        if isinstance(c.args.get("kind"), kind):
            return c.args["kind"]
    return None


def _name(node: exp.Expression) -> str:
    return node.name if not isinstance(node, exp.Identifier) else str(node.this)


def _find(table: CreateTable | None, name: str) -> Column | None:
    if table is None:
        return None
    return next((c for c in table.columns if c.name.lower() == name.lower()), None)


def _type_differs(a: Column, b: Column) -> bool:
    fields = ("data_type", "unsigned", "precision", "scale", "fsp", "length", "values", "nullable", "charset")
    return any(getattr(a, f) != getattr(b, f) for f in fields) or (a.column_type != b.column_type)


def _default_charset(table: CreateTable | None) -> tuple[str, str]:
    """The charset and collation a new text column of ``table`` gets when its DDL names none."""
    if table is not None and table.collation:
        return _charset_of(table.collation), table.collation
    return "utf8mb4", _default_collation("utf8mb4")


def _charset_of(collation: str) -> str:
    return collation.split("_")[0]


def _default_collation(charset: str) -> str:
    known = charset_by_name(charset)
    default = getattr(known, "collation", None)  # pymysql's default collation of the charset
    return str(default) if default else f"{charset}_general_ci"


def _table_charset(properties: exp.Expression | None) -> tuple[str, str]:
    charset: str | None = None
    collation: str | None = None
    if properties is not None:
        found = properties.find(exp.CharacterSetProperty)
        if found is not None:
            charset = found.this.name.lower()
        collate = properties.find(exp.CollateProperty)
        if collate is not None:
            collation = collate.this.name.lower()
    charset = charset or (_charset_of(collation) if collation else "utf8mb4")
    return charset, collation or _default_collation(charset)


def _column(definition: exp.ColumnDef, charset: str, collation: str) -> Column:
    """A column definition → a ``Column`` as discovery would read it from information_schema."""
    name = _name(definition.this)
    kind = definition.args.get("kind")
    if kind is None:
        raise UnparsedDdlError(f"column `{name}` has no type")
    params = [int(p.name) if p.name.isdigit() else p.name for p in kind.expressions]
    nullable = not (_has(definition, exp.NotNullColumnConstraint) and not _not_null_allows(definition))
    nullable = nullable and not _has(definition, exp.PrimaryKeyColumnConstraint)
    base = Column(
        name=name,
        data_type="",
        column_type="",
        nullable=nullable,
        auto_increment=_has(definition, exp.AutoIncrementColumnConstraint),
    )
    typed = _typed(kind.this, params, kind)
    if typed.data_type in ("char", "varchar", "enum", "set", *_TEXT_LENGTHS):
        column_charset = _constraint(definition, exp.CharacterSetColumnConstraint)
        column_collation = _constraint(definition, exp.CollateColumnConstraint)
        cs = column_charset.this.name.lower() if column_charset is not None else None
        co = column_collation.this.name.lower() if column_collation is not None else None
        if cs is None:
            cs = _charset_of(co) if co else charset
        if co is None:
            co = collation if cs == charset else _default_collation(cs)
        if _has(definition, exp.BinaryColumnConstraint):
            co = f"{cs}_bin"
        typed = replace(typed, charset=cs, collation=co)
    elif typed.data_type == "json":
        typed = replace(typed, charset="utf8mb4")
    return replace(typed, name=base.name, nullable=base.nullable, auto_increment=base.auto_increment)


def _not_null_allows(definition: exp.ColumnDef) -> bool:
    found = _constraint(definition, exp.NotNullColumnConstraint)
    return bool(found is not None and found.args.get("allow_null"))  # an explicit NULL


def _typed(t: Any, params: list[Any], kind: exp.DataType) -> Column:
    types = exp.DataType.Type
    if t in _INTEGERS:
        name, precision, width, unsigned = _INTEGERS[t]
        shown = params[0] if params else width
        column_type = f"{name}({shown})" + (" unsigned" if unsigned else "")
        return Column("", name, column_type, unsigned=unsigned, precision=precision, scale=0)
    if t == types.BOOLEAN:
        return Column("", "tinyint", "tinyint(1)", precision=3, scale=0)
    if t == types.SERIAL:  # BIGINT UNSIGNED NOT NULL AUTO_INCREMENT UNIQUE
        return Column(
            "", "bigint", "bigint(20) unsigned", nullable=False, unsigned=True, precision=20, scale=0
        )
    key = t.name.lower() if hasattr(t, "name") else str(t).lower()
    if key not in _SIMPLE:
        raise UnparsedDdlError(f"type {kind.sql('mysql')} is not one binlake maps")
    if key in ("decimal", "udecimal"):
        precision = params[0] if params else 10
        scale = params[1] if len(params) > 1 else 0
        unsigned = key == "udecimal"
        return Column("", "decimal", f"decimal({precision},{scale})" + (" unsigned" if unsigned else ""),
                      unsigned=unsigned, precision=precision, scale=scale)  # fmt: skip
    if key == "float":
        shape = f"float({params[0]},{params[1]})" if len(params) == 2 else "float"
        return Column("", "float", shape, precision=12)
    if key == "double":
        shape = f"double({params[0]},{params[1]})" if len(params) == 2 else "double"
        return Column("", "double", shape, precision=22)
    if key == "bit":
        bits = params[0] if params else 1
        return Column("", "bit", f"bit({bits})", precision=bits)
    if key in ("datetime", "timestamptz", "time"):
        name = {"timestamptz": "timestamp"}.get(key, key)
        fsp = params[0] if params else 0
        return Column("", name, f"{name}({fsp})" if fsp else name, fsp=fsp)
    if key == "date":
        return Column("", "date", "date")
    if key == "year":
        return Column("", "year", "year(4)")
    if key in ("char", "binary"):
        length = params[0] if params else 1
        return Column("", key, f"{key}({length})", length=length)
    if key in ("varchar", "varbinary"):
        return Column("", key, f"{key}({params[0]})", length=params[0])
    if key in _TEXT_LENGTHS:
        return Column("", key, key, length=_TEXT_LENGTHS[key])
    if key in _BLOB_LENGTHS:
        return Column("", key, key, length=_BLOB_LENGTHS[key])
    if key in ("enum", "set"):
        values = tuple(str(e.this) for e in kind.expressions)
        quoted = ",".join("'" + v.replace("'", "''") + "'" for v in values)
        # information_schema's length: the longest member (ENUM), all members joined by commas (SET)
        longest = max((len(v) for v in values), default=0)
        length = longest if key == "enum" else sum(len(v) for v in values) + max(0, len(values) - 1)
        return Column("", key, f"{key}({quoted})", length=length, values=values)
    if key == "json":
        return Column("", "json", "longtext", length=4294967295)
    return Column("", "geometry", "geometry")
