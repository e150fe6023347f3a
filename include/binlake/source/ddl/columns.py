"""A column definition in DDL → a ``Column`` exactly as discovery reads it from information_schema.

The stream decodes rows with what the parser says, so every field decoding and type mapping use
must be the server's: the type a spelling stands for (``REAL`` is DOUBLE, ``LONG`` is MEDIUMTEXT,
``ZEROFILL`` implies UNSIGNED, ``CHAR … CHARACTER SET binary`` is BINARY, ``TEXT(n)`` is the
smallest text type that holds n characters), the charset and collation a text column ends up with
(its own, else the table's, else the database's; ``utf8`` is ``utf8mb3``; ``NATIONAL`` is utf8mb3,
``ASCII`` latin1, ``UNICODE`` ucs2), ENUM/SET members as the server stores them (escapes undone,
trailing spaces cut, hex literals read), and the default in information_schema's spelling
(``schema.defaults`` reads it back).

This module reads the definition's words and attributes; ``column_types`` says which type they
stand for, ``column_defaults`` reads and spells the default.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from binlake.events import Column
from binlake.source.ddl.column_defaults import default_text, default_value
from binlake.source.ddl.column_types import (
    TEXTUAL,
    TypeSpec,
    hex_bytes,
    members_column,
    typed_column,
    with_charset,
)
from binlake.source.ddl.tokens import Cursor, Tok, UnparsedDdlError
from binlake.source.server.charsets import Charsets


@dataclass(frozen=True)
class ColumnDef:
    """A parsed column definition: the column and what the definition says about keys."""

    column: Column
    primary_key: bool = False
    unique: bool = False


def column_definition(cur: Cursor, name: str, table: tuple[str, str], charsets: Charsets) -> ColumnDef:
    """The definition at ``cur`` (after the column's name), for a table whose default charset and
    collation are ``table``."""
    spec = TypeSpec(words=_type_words(cur))
    _type_arguments(cur, spec)
    _attributes(cur, spec)
    column = _column(name, spec, table, charsets)
    if spec.primary_key:
        column = replace(column, nullable=False)
    return ColumnDef(column, spec.primary_key, spec.unique or spec.serial_default)


def _type_words(cur: Cursor) -> list[str]:
    first = cur.next()
    if first.kind != "word":
        raise UnparsedDdlError(f"expected a column type, found `{first.text}`")
    words = [first.upper]
    follows = {
        "DOUBLE": ("PRECISION",),
        "NATIONAL": ("CHAR", "CHARACTER", "VARCHAR", "VARCHARACTER"),
        "NCHAR": ("VARCHAR", "VARYING", "VARCHARACTER"),
        "CHAR": ("VARYING", "BYTE"),
        "CHARACTER": ("VARYING",),
        "LONG": ("VARCHAR", "VARBINARY"),  # LONG BINARY: MEDIUMTEXT with the BINARY attribute
    }
    if first.upper == "LONG" and cur.peek_upper() in ("CHAR", "CHARACTER") and cur.peek_upper(1) == "VARYING":
        words.append(cur.next().upper)  # LONG CHAR VARYING: MEDIUMTEXT (not LONG's CHARACTER SET …)
    while words[-1] in follows and cur.peek_upper() in follows[words[-1]]:
        words.append(cur.next().upper)
        if words[-1] == "CHAR" and cur.peek_upper() == "VARYING":
            words.append(cur.next().upper)
    return words


def _type_arguments(cur: Cursor, spec: TypeSpec) -> None:
    if not cur.accept_punct("("):
        return
    is_list = spec.words[0] in ("ENUM", "SET")
    while True:
        tok = cur.next()
        if is_list:
            spec.members.append(_member(cur, tok))
        else:
            spec.params.append(tok.text)
        if cur.accept_punct(")"):
            return
        cur.expect_punct(",")


def _member(cur: Cursor, tok: Tok) -> str | bytes:
    """An ENUM/SET member as written: text, or bytes (hex literals) the column's charset decodes."""
    if tok.kind == "introducer":
        tok = cur.next()
    if tok.kind not in ("string", "hex"):
        raise UnparsedDdlError(f"expected a quoted value, found `{tok.text}`")
    value: str | bytes = tok.text if tok.kind == "string" else hex_bytes(tok.text)
    while (nxt := cur.peek()) is not None and nxt.kind in ("string", "hex") and isinstance(value, str):
        more = cur.next()
        value += more.text if more.kind == "string" else hex_bytes(more.text).decode("utf-8", "replace")
    return value


def _attributes(cur: Cursor, spec: TypeSpec) -> None:
    while not cur.done() and not cur.is_punct(",") and not cur.is_punct(")"):
        word = cur.peek_upper()
        if word in ("FIRST", "AFTER"):
            return
        cur.next()
        if word == "UNSIGNED":
            spec.unsigned = True
        elif word == "SIGNED":
            pass
        elif word == "ZEROFILL":
            spec.zerofill = spec.unsigned = True
        elif word in ("CHARACTER", "CHAR", "CHARSET"):
            cur.accept("SET")
            cur.accept_punct("=")
            spec.charset = cur.name().lower()
        elif word == "COLLATE":
            cur.accept_punct("=")
            spec.collation = cur.name().lower()
        elif word == "BINARY":
            spec.binary = True
        elif word == "ASCII":
            spec.charset = "latin1"
        elif word == "UNICODE":
            spec.charset = "ucs2"
        elif word == "BYTE":
            spec.charset = "binary"
        elif word == "NOT":
            if not cur.accept("NULL"):
                raise UnparsedDdlError("expected NULL after NOT in a column definition")
            spec.nullable = False
        elif word == "NULL":
            spec.nullable = True
        elif word == "DEFAULT":
            spec.default = default_value(cur)
        elif word == "ON":
            if not cur.accept("UPDATE"):
                raise UnparsedDdlError("expected UPDATE after ON in a column definition")
            default_value(cur)
        elif word == "AUTO_INCREMENT":
            spec.auto_increment = True
        elif word == "SERIAL":  # SERIAL DEFAULT VALUE: NOT NULL AUTO_INCREMENT UNIQUE
            cur.accept("DEFAULT", "VALUE")
            spec.serial_default = spec.auto_increment = True
            spec.nullable = False
        elif word == "UNIQUE":
            cur.accept("KEY")
            spec.unique = True
        elif word in ("PRIMARY", "KEY"):
            cur.accept("KEY")
            spec.primary_key = True
        elif word in ("COMMENT", "COLUMN_FORMAT", "STORAGE", "COMPRESSED", "SRID", "REF_SYSTEM_ID"):
            if cur.accept_punct("=") or not _is_attribute_word(cur.peek_upper()):
                cur.next()
        elif word in ("INVISIBLE", "VISIBLE", "VIRTUAL", "STORED", "PERSISTENT"):
            pass
        elif word in ("GENERATED", "AS"):
            spec.generated = True
            cur.accept("ALWAYS")
            cur.accept("AS")
            cur.skip_parenthesised()
        elif word in ("CHECK", "CONSTRAINT"):
            if word == "CONSTRAINT" and not cur.is_punct("(") and cur.peek_upper() != "CHECK":
                cur.next()
            cur.accept("CHECK")
            start = cur.at
            cur.skip_parenthesised()
            # MariaDB's JSON is LONGTEXT with CHECK (json_valid(col)): spelled out, it is JSON too
            spec.json_check = spec.json_check or cur.toks[start + 1].upper == "JSON_VALID"
        elif word == "REFERENCES":
            _skip_references(cur)
        elif word in ("WITH", "WITHOUT"):
            cur.accept("SYSTEM", "VERSIONING")
        elif word.endswith("_ATTRIBUTE"):
            cur.accept_punct("=")
            cur.next()
        else:
            raise UnparsedDdlError(f"`{word}` in a column definition is not something binlake reads")


def _is_attribute_word(word: str) -> bool:
    return word in ("NOT", "NULL", "DEFAULT", "COMMENT", "FIRST", "AFTER", "PRIMARY", "UNIQUE", "KEY")


def _skip_references(cur: Cursor) -> None:
    cur.dotted()
    if cur.is_punct("("):
        cur.skip_parenthesised()
    while cur.peek_upper() in ("MATCH", "ON"):
        if cur.accept("MATCH"):
            cur.next()
            continue
        cur.next()
        cur.next()  # DELETE | UPDATE
        for words in (("SET", "NULL"), ("SET", "DEFAULT"), ("NO", "ACTION"), ("CASCADE",), ("RESTRICT",)):
            if cur.accept(*words):
                break


def _column(name: str, spec: TypeSpec, table: tuple[str, str], charsets: Charsets) -> Column:
    column = typed_column(spec)
    if spec.json_check and column.data_type == "text*" and column.column_type == "longtext":
        column = typed_column(replace(spec, words=["JSON"]))
    if column.data_type in TEXTUAL or column.data_type == "text*":
        column = with_charset(column, spec, table, charsets)
        if column.data_type in ("enum", "set") and column.charset:
            members = members_column(column.data_type, spec.members, column.charset)
            column = replace(
                column, column_type=members.column_type, length=members.length, values=members.values
            )
    nullable = spec.nullable if spec.nullable is not None else True
    if column.data_type == "bigint" and spec.words == ["SERIAL"]:
        nullable = False
    column = replace(
        column,
        name=name,
        nullable=nullable,
        auto_increment=spec.auto_increment or spec.words == ["SERIAL"],
        generated=spec.generated,
    )
    return replace(column, default=default_text(column, spec.default))
