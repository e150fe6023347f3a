"""A column definition in DDL → a ``Column`` exactly as discovery reads it from information_schema.

The stream decodes rows with what the parser says, so every field decoding and type mapping use
must be the server's: the type a spelling stands for (``REAL`` is DOUBLE, ``LONG`` is MEDIUMTEXT,
``ZEROFILL`` implies UNSIGNED, ``CHAR … CHARACTER SET binary`` is BINARY, ``TEXT(n)`` is the
smallest text type that holds n characters), the charset and collation a text column ends up with
(its own, else the table's, else the database's; ``utf8`` is ``utf8mb3``; ``NATIONAL`` is utf8mb3,
``ASCII`` latin1, ``UNICODE`` ucs2), ENUM/SET members as the server stores them (escapes undone,
trailing spaces cut, hex literals read), and the default in information_schema's spelling
(``schema.defaults`` reads it back).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from decimal import ROUND_HALF_UP, Context, Decimal, InvalidOperation

from binlake.events import Column
from binlake.source.charsets import Charsets, canonical_charset, canonical_collation, charset_of
from binlake.source.ddl_tokens import Cursor, Tok, UnparsedDdlError

# (data_type, information_schema precision, display width signed, unsigned)
_INTEGERS: dict[str, tuple[str, int, int, int]] = {
    "tinyint": ("tinyint", 3, 4, 3),
    "smallint": ("smallint", 5, 6, 5),
    "mediumint": ("mediumint", 7, 9, 8),  # precision 8 when unsigned (below)
    "int": ("int", 10, 11, 10),
    "bigint": ("bigint", 19, 20, 20),
}
_INTEGER_WORDS = {
    "TINYINT": "tinyint", "INT1": "tinyint", "SMALLINT": "smallint", "INT2": "smallint",
    "MEDIUMINT": "mediumint", "INT3": "mediumint", "MIDDLEINT": "mediumint", "INT": "int",
    "INTEGER": "int", "INT4": "int", "BIGINT": "bigint", "INT8": "bigint",
}  # fmt: skip
_TEXTS = (("tinytext", 255), ("text", 65535), ("mediumtext", 16777215), ("longtext", 4294967295))
_BLOBS = (("tinyblob", 255), ("blob", 65535), ("mediumblob", 16777215), ("longblob", 4294967295))
_GEOMETRY = {
    "GEOMETRY", "POINT", "LINESTRING", "POLYGON", "MULTIPOINT", "MULTILINESTRING", "MULTIPOLYGON",
    "GEOMETRYCOLLECTION", "GEOMCOLLECTION",
}  # fmt: skip
_TEXTUAL = {"char", "varchar", "enum", "set", *(t for t, _ in _TEXTS)}
_TEMPORAL = {"date", "time", "datetime", "timestamp"}
#: Bytes per character of the charsets that are not one byte a character.
_MBMAXLEN = {
    "utf8mb4": 4, "utf8mb3": 3, "ucs2": 2, "utf16": 4, "utf16le": 4, "utf32": 4, "big5": 2,
    "gbk": 2, "gb2312": 2, "sjis": 2, "cp932": 2, "euckr": 2, "ujis": 3, "eucjpms": 3,
}  # fmt: skip
_NOW = {"CURRENT_TIMESTAMP", "NOW", "LOCALTIME", "LOCALTIMESTAMP"}


@dataclass(frozen=True)
class ColumnDef:
    """A parsed column definition: the column and what the definition says about keys."""

    column: Column
    primary_key: bool = False
    unique: bool = False


@dataclass
class _Spec:
    """What a definition says, before the charset and default are resolved."""

    words: list[str]
    params: list[str] = field(default_factory=list)
    members: list[str | bytes] = field(default_factory=list)
    unsigned: bool = False
    zerofill: bool = False
    charset: str | None = None
    collation: str | None = None
    binary: bool = False
    nullable: bool | None = None
    default: tuple[str, object] | None = None
    auto_increment: bool = False
    generated: bool = False
    primary_key: bool = False
    unique: bool = False
    serial_default: bool = False
    json_check: bool = False


def column_definition(cur: Cursor, name: str, table: tuple[str, str], charsets: Charsets) -> ColumnDef:
    """The definition at ``cur`` (after the column's name), for a table whose default charset and
    collation are ``table``."""
    spec = _Spec(words=_type_words(cur))
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
    while words[-1] in follows and cur.peek_upper() in follows[words[-1]]:
        words.append(cur.next().upper)
        if words[-1] == "CHAR" and cur.peek_upper() == "VARYING":
            words.append(cur.next().upper)
    return words


def _type_arguments(cur: Cursor, spec: _Spec) -> None:
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
    value: str | bytes = tok.text if tok.kind == "string" else _hex_bytes(tok.text)
    while (nxt := cur.peek()) is not None and nxt.kind in ("string", "hex") and isinstance(value, str):
        more = cur.next()
        value += more.text if more.kind == "string" else _hex_bytes(more.text).decode("utf-8", "replace")
    return value


def _hex_bytes(text: str) -> bytes:
    return bytes.fromhex(text if len(text) % 2 == 0 else "0" + text)


#: Python's codec for a MySQL charset (MySQL's latin1 is Windows-1252).
_CODECS = {
    "latin1": "cp1252", "utf8mb3": "utf-8", "utf8mb4": "utf-8", "ucs2": "utf-16-be",
    "utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be", "binary": "latin-1",
    "koi8r": "koi8_r", "koi8u": "koi8_u", "euckr": "euc_kr", "ujis": "euc_jp", "eucjpms": "euc_jp",
    "sjis": "shift_jis", "cp932": "cp932", "gb2312": "gb2312", "gbk": "gbk", "big5": "big5",
    "greek": "iso8859_7", "hebrew": "iso8859_8", "latin2": "iso8859_2", "latin5": "iso8859_9",
    "latin7": "iso8859_13", "swe7": "latin-1", "ascii": "ascii", "tis620": "tis_620",
}  # fmt: skip
#: Bytes of the narrowest character (information_schema's text lengths are bytes / this).
_MBMINLEN = {"ucs2": 2, "utf16": 2, "utf16le": 2, "utf32": 4}


def decoded(value: bytes, charset: str) -> str:
    """Bytes as the server reads them in ``charset`` (a byte it cannot read becomes ``?``)."""
    codec = _CODECS.get(charset, charset)
    try:
        return value.decode(codec, "replace").replace("\ufffd", "?")
    except LookupError:
        return value.decode("latin-1")


def _attributes(cur: Cursor, spec: _Spec) -> None:
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


def default_value(cur: Cursor) -> tuple[str, object]:
    """A DEFAULT's value: ``(kind, value)`` with kind null/number/string/bytes/bits/now/expression."""
    if cur.is_punct("("):
        start = cur.at
        cur.skip_parenthesised()
        inner = cur.toks[start + 1 : cur.at - 1]
        if len(inner) == 1 and inner[0].kind in ("number", "string"):
            return ("number" if inner[0].kind == "number" else "string", inner[0].text)
        return ("expression", _joined(cur.toks[start : cur.at]))
    introducer = cur.introducer()
    if introducer is not None and (tok := cur.peek()) is not None and tok.kind == "hex":
        cur.next()
        value = _hex_bytes(tok.text)
        return ("bytes", value) if introducer == "binary" else ("string", decoded(value, introducer))
    sign = ""
    if cur.is_punct("-") or cur.is_punct("+"):
        sign = "-" if cur.next().text == "-" else ""
    tok = cur.next()
    if tok.kind == "punct" and tok.text == "." and (nxt := cur.peek()) is not None and nxt.kind == "number":
        return ("number", sign + "0." + cur.next().text)
    if tok.kind == "number":
        return ("number", sign + tok.text)
    if tok.kind in ("string", "hex"):
        if tok.kind == "hex":
            return ("bytes", _hex_bytes(tok.text))
        text = tok.text
        while (nxt := cur.peek()) is not None and nxt.kind == "string":
            text += cur.next().text
        return ("string", text)
    if tok.kind == "bit":
        return ("bits", tok.text)
    word = tok.upper
    if word == "NULL":
        return ("null", None)
    if word in ("TRUE", "FALSE"):
        return ("number", "1" if word == "TRUE" else "0")
    if word in _NOW:
        fsp = 0
        if cur.accept_punct("("):
            if not cur.is_punct(")"):
                fsp = int(cur.next().text)
            cur.expect_punct(")")
        return ("now", fsp)
    if cur.is_punct("("):  # a function: uuid(), curdate(), nextval(s)
        start = cur.at
        cur.skip_parenthesised()
        return ("expression", tok.text + _joined(cur.toks[start : cur.at]))
    return ("expression", tok.text)


def _joined(toks: list[Tok]) -> str:
    return "".join(f"'{t.text}'" if t.kind == "string" else t.text for t in toks)


# -- the type ----------------------------------------------------------------------------------


def _column(name: str, spec: _Spec, table: tuple[str, str], charsets: Charsets) -> Column:
    column = _typed(spec)
    if spec.json_check and column.data_type == "text*" and column.column_type == "longtext":
        column = _typed(replace(spec, words=["JSON"]))
    if column.data_type in _TEXTUAL or column.data_type == "text*":
        column = _with_charset(column, spec, table, charsets)
        if column.data_type in ("enum", "set") and column.charset:
            members = _members(column.data_type, spec.members, column.charset)
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


def _typed(spec: _Spec) -> Column:
    words, params = spec.words, spec.params
    head = words[0]
    if head in _INTEGER_WORDS or head == "SERIAL":
        return _integer(_INTEGER_WORDS.get(head, "bigint"), params, spec, serial=head == "SERIAL")
    if head in ("BOOL", "BOOLEAN"):
        return Column("", "tinyint", "tinyint(1)", precision=3, scale=0)
    if head == "BIT":
        bits = max(1, _int(params[0])) if params else 1  # BIT(0) is BIT(1)
        return Column("", "bit", f"bit({bits})", precision=bits)
    if head in ("DECIMAL", "DEC", "NUMERIC", "FIXED"):
        return _decimal(params, spec)
    if head in ("FLOAT", "FLOAT4", "FLOAT8", "DOUBLE", "REAL"):
        return _floating(head, params, spec)
    if head in ("DATE", "TIME", "DATETIME", "TIMESTAMP"):
        fsp = _int(params[0]) if params and head != "DATE" else 0
        name = head.lower()
        return Column("", name, f"{name}({fsp})" if fsp else name, fsp=None if head == "DATE" else fsp)
    if head == "YEAR":
        width = _int(params[0]) if params else 4
        return Column("", "year", f"year({2 if width == 2 else 4})")
    if head in ("JSON",):
        return Column("", "json", "longtext", length=4294967295, charset="utf8mb4")
    if head in _GEOMETRY:
        name = "geometrycollection" if head == "GEOMCOLLECTION" else head.lower()
        return Column("", name, name)
    if head in ("ENUM", "SET"):
        return _members(head.lower(), spec.members)  # read again once the charset is known
    return _string(words, params, spec)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UnparsedDdlError(f"`{text}` is not a whole number") from None


def _integer(name: str, params: list[str], spec: _Spec, serial: bool = False) -> Column:
    data_type, precision, signed_width, unsigned_width = _INTEGERS[name]
    unsigned = spec.unsigned or serial
    width = _int(params[0]) if params else (unsigned_width if unsigned else signed_width)
    column_type = (
        f"{data_type}({width})" + (" unsigned" if unsigned else "") + (" zerofill" if spec.zerofill else "")
    )
    if unsigned and data_type in ("bigint", "mediumint"):
        precision += 1  # information_schema: MEDIUMINT UNSIGNED 8, BIGINT UNSIGNED 20
    return Column("", data_type, column_type, unsigned=unsigned, precision=precision, scale=0)


def _decimal(params: list[str], spec: _Spec) -> Column:
    # DECIMAL(19.5): the server reads the number as the precision (19), with scale 0.
    precision = int(Decimal(params[0])) if params else 10
    precision = precision or 10  # DECIMAL(0): the default precision
    scale = _int(params[1]) if len(params) > 1 else 0
    suffix = (" unsigned" if spec.unsigned else "") + (" zerofill" if spec.zerofill else "")
    return Column("", "decimal", f"decimal({precision},{scale}){suffix}", unsigned=spec.unsigned,
                  precision=precision, scale=scale)  # fmt: skip


def _floating(head: str, params: list[str], spec: _Spec) -> Column:
    double = head in ("DOUBLE", "REAL", "FLOAT8")
    if head == "FLOAT" and len(params) == 1:
        double = int(Decimal(params[0])) > 24  # FLOAT(p): a precision in bits
        params = []
    name = "double" if double else "float"
    suffix = (" unsigned" if spec.unsigned else "") + (" zerofill" if spec.zerofill else "")
    if len(params) == 2:
        return Column("", name, f"{name}({params[0]},{params[1]}){suffix}", unsigned=spec.unsigned,
                      precision=_int(params[0]), scale=_int(params[1]))  # fmt: skip
    return Column("", name, name + suffix, unsigned=spec.unsigned, precision=22 if double else 12)


def _members(kind: str, members: list[str | bytes], charset: str = "utf8mb4") -> Column:
    # the server cuts trailing spaces of members and reads hex members in the column's charset
    values = tuple((m if isinstance(m, str) else decoded(m, charset)).rstrip(" ") for m in members)
    quoted = ",".join("'" + v.replace("'", "''") + "'" for v in values)
    # information_schema's length: the longest member (ENUM), all members joined by commas (SET)
    longest = max((len(v) for v in values), default=0)
    length = longest if kind == "enum" else sum(len(v) for v in values) + max(0, len(values) - 1)
    return Column("", kind, f"{kind}({quoted})", length=length, values=values)


def _string(words: list[str], params: list[str], spec: _Spec) -> Column:
    head = words[0]
    length = _int(params[0]) if params else None
    if head == "LONG":  # LONG, LONG VARCHAR: MEDIUMTEXT; LONG VARBINARY: MEDIUMBLOB
        blob = words[1:2] == ["VARBINARY"]
        return Column("", "mediumblob" if blob else "mediumtext", "mediumblob" if blob else "mediumtext",
                      length=16777215)  # fmt: skip
    if head in ("BINARY", "VARBINARY") or words[-1] == "BYTE":
        kind = "varbinary" if head == "VARBINARY" else "binary"
        size = length if length is not None else 1
        return Column("", kind, f"{kind}({size})", length=size)
    if head in ("TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB"):
        name = _sized(_BLOBS, head.lower(), length)
        return Column("", name, name, length=dict(_BLOBS)[name])
    if head in ("TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT"):
        # TEXT(n) holds n characters: its size depends on the charset, resolved later
        return Column("", "text*", head.lower(), length=length)
    varying = head in ("VARCHAR", "NVARCHAR", "VARCHARACTER") or "VARYING" in words or words[-1] == "VARCHAR"
    if head in ("CHAR", "CHARACTER", "NCHAR", "NATIONAL", "VARCHAR", "NVARCHAR", "VARCHARACTER"):
        if head in ("NCHAR", "NVARCHAR", "NATIONAL"):
            spec.charset = spec.charset or "utf8mb3"
        kind = "varchar" if varying else "char"
        if kind == "varchar" and length is None:
            raise UnparsedDdlError("VARCHAR without a length")
        size = length if length is not None else 1
        return Column("", kind, f"{kind}({size})", length=size)
    raise UnparsedDdlError(f"type `{' '.join(words).lower()}` is not one binlake maps")


def _sized(sizes: tuple[tuple[str, int], ...], name: str, wanted: int | None) -> str:
    if wanted is None:
        return name
    return next((n for n, size in sizes if wanted <= size), sizes[-1][0])


def _with_charset(column: Column, spec: _Spec, table: tuple[str, str], charsets: Charsets) -> Column:
    charset = canonical_charset(spec.charset) if spec.charset and spec.charset != "default" else None
    collation = canonical_collation(spec.collation) if spec.collation else None
    if charset is None:
        charset = charset_of(collation) if collation else table[0]
    if charset == "binary" and column.data_type != "enum" and column.data_type != "set":
        return _as_binary(column)
    if collation is None:
        collation = table[1] if charset == table[0] else charsets.collation_of(charset)
    if spec.binary:
        collation = f"{charset}_bin"
    if column.data_type == "text*":
        chars = column.length
        name = column.column_type
        if chars is not None:
            name = _sized(_TEXTS, "text", chars * _MBMAXLEN.get(charset, 1))
        column = replace(column, data_type=name, column_type=name, length=dict(_TEXTS)[name])
    if column.data_type in dict(_TEXTS) and charset in _MBMINLEN:
        column = replace(column, length=dict(_TEXTS)[column.data_type] // _MBMINLEN[charset])
    return replace(column, charset=charset, collation=collation)


def _as_binary(column: Column) -> Column:
    """CHAR/VARCHAR/TEXT … CHARACTER SET binary: BINARY/VARBINARY/BLOB."""
    if column.data_type in ("char", "varchar"):
        kind = "binary" if column.data_type == "char" else "varbinary"
        return Column("", kind, f"{kind}({column.length})", length=column.length)
    chars = column.length
    name = column.column_type.replace("text", "blob")
    if chars is not None:
        name = _sized(_BLOBS, "blob", chars)
    return Column("", name, name, length=dict(_BLOBS)[name])


# -- the default, as information_schema spells it ----------------------------------------------


def default_text(column: Column, default: tuple[str, object] | None) -> str | None:
    if default is None:
        return None
    kind, value = default
    if kind == "null":
        return "NULL"
    if kind == "now":
        return f"current_timestamp({value or ''})"
    if kind == "expression":
        return str(value)
    t = column.data_type
    if column.is_integral or t in ("decimal", "float", "double", "year", "bit"):
        return _numeric_default(column, kind, value)
    if kind == "bits":  # b'101' for a text column: the bytes of that number
        number = int(str(value) or "0", 2)
        value = number.to_bytes(max(1, (number.bit_length() + 7) // 8), "big")
    if isinstance(value, bytes):
        if column.charset is not None:
            text = decoded(value, column.charset)
        else:
            try:
                text = value.decode("utf-8")
            except UnicodeDecodeError:
                return "X'" + value.hex() + "'"  # how the server shows bytes that are no text
    else:
        text = str(value)
    if t in _TEMPORAL:
        text = _temporal(t, text, column.fsp or 0)
    if t in ("enum", "set"):
        text = text.rstrip(" ")
    if t == "binary" and column.length:
        text = text.ljust(column.length, "\0")  # BINARY(n) pads with zero bytes
    escaped = text.replace("\\", "\\\\").replace("\0", "\\0").replace("'", "''")
    return "'" + escaped + "'"


def _numeric_default(column: Column, kind: str, value: object) -> str:
    if kind == "bytes":
        number = Decimal(int.from_bytes(value, "big")) if isinstance(value, bytes) else Decimal(0)
    elif kind == "bits":
        number = Decimal(int(str(value) or "0", 2))
    else:
        try:
            number = Decimal(str(value).strip())
        except InvalidOperation:
            return "'" + str(value) + "'"
    if column.data_type == "bit":
        return "b'" + format(int(number), "b") + "'"
    if column.data_type == "year":
        year = int(number.to_integral_value(ROUND_HALF_UP))
        if (kind == "string" and year == 0) or 0 < year < 70:
            year += 2000  # two-digit years: 1-69 are 2001-2069, 70-99 are 1970-1999
        elif 70 <= year <= 99:
            year += 1900
        return str(year)
    if column.is_integral:
        return str(int(number.to_integral_value(ROUND_HALF_UP)))
    if column.data_type == "decimal":
        exponent = Decimal(1).scaleb(-(column.scale or 0))
        return format(number.quantize(exponent, ROUND_HALF_UP, context=_WIDE), "f")
    return format(number, "f") if -(10**15) < number < 10**15 else str(number)


_DIGITS = re.compile(r"\d+")
_WIDE = Context(prec=100)  # DECIMAL(65, 30) defaults


def _temporal(data_type: str, text: str, fsp: int) -> str:
    """A temporal literal in the server's spelling (``'2024-1-2 1:2'`` → ``2024-01-02 01:02:00``)."""
    parts = _DIGITS.findall(text)
    if not parts:
        return text
    if len(parts) == 1 and len(parts[0]) in (6, 8, 12, 14):  # compact: YYYYMMDD[HHMMSS], HHMMSS
        digits = parts[0]
        if data_type == "time" and len(digits) == 6:
            parts = [digits[0:2], digits[2:4], digits[4:6]]
        else:
            year = 4 if len(digits) in (8, 14) else 2
            parts = [digits[:year]] + [digits[i : i + 2] for i in range(year, len(digits), 2)]
    if data_type == "time":
        sign = "-" if text.strip().startswith("-") else ""
        if "-" in text.strip().lstrip("-") and " " in text.strip():
            parts = parts[3:]  # a datetime given to a TIME: its time part
        h, m, sec, frac = [*parts, "0", "0", "0", ""][:4] if len(parts) > 1 else ["0", "0", parts[0], ""]
        shown = f"{sign}{int(h):02d}:{int(m):02d}:{int(sec):02d}"
        return shown + _fraction(frac, fsp)
    y, mo, d = [*parts, "0", "0", "0"][:3]
    date = f"{int(y):04d}-{int(mo):02d}-{int(d):02d}"
    if data_type == "date":
        return date
    h, mi, sec, frac = [*parts[3:], "0", "0", "0", ""][:4]
    return f"{date} {int(h):02d}:{int(mi):02d}:{int(sec):02d}" + _fraction(frac, fsp)


def _fraction(frac: str, fsp: int) -> str:
    return "." + (frac + "0" * fsp)[:fsp] if fsp else ""
