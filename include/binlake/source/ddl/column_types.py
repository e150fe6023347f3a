"""A column's type words → the ``Column`` information_schema shows for them: the type a spelling
stands for (``REAL`` is DOUBLE, ``LONG`` is MEDIUMTEXT, ``ZEROFILL`` implies UNSIGNED, ``CHAR …
CHARACTER SET binary`` is BINARY, ``TEXT(n)`` is the smallest text type that holds n characters),
the charset and collation a text column ends up with, ENUM/SET members as the server stores them,
and literals decoded in a column's charset.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from decimal import Decimal

from binlake.events import Column
from binlake.source.ddl.tokens import UnparsedDdlError
from binlake.source.server.charsets import Charsets, canonical_charset, canonical_collation, charset_of

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


TEXTUAL = {"char", "varchar", "enum", "set", *(t for t, _ in _TEXTS)}


#: Bytes per character of the charsets that are not one byte a character.
_MBMAXLEN = {
    "utf8mb4": 4, "utf8mb3": 3, "ucs2": 2, "utf16": 4, "utf16le": 4, "utf32": 4, "big5": 2,
    "gbk": 2, "gb2312": 2, "sjis": 2, "cp932": 2, "euckr": 2, "ujis": 3, "eucjpms": 3,
}  # fmt: skip


@dataclass
class TypeSpec:
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


def hex_bytes(text: str) -> bytes:
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


def typed_column(spec: TypeSpec) -> Column:
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
        return members_column(head.lower(), spec.members)  # read again once the charset is known
    return _string(words, params, spec)


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise UnparsedDdlError(f"`{text}` is not a whole number") from None


def _integer(name: str, params: list[str], spec: TypeSpec, serial: bool = False) -> Column:
    data_type, precision, signed_width, unsigned_width = _INTEGERS[name]
    unsigned = spec.unsigned or serial
    # INT(0): a display width of 0 is the type's default width
    width = (_int(params[0]) if params else 0) or (unsigned_width if unsigned else signed_width)
    column_type = (
        f"{data_type}({width})" + (" unsigned" if unsigned else "") + (" zerofill" if spec.zerofill else "")
    )
    if unsigned and data_type in ("bigint", "mediumint"):
        precision += 1  # information_schema: MEDIUMINT UNSIGNED 8, BIGINT UNSIGNED 20
    return Column("", data_type, column_type, unsigned=unsigned, precision=precision, scale=0)


def _decimal(params: list[str], spec: TypeSpec) -> Column:
    # DECIMAL(19.5): the server reads the number as the precision (19), with scale 0.
    precision = int(Decimal(params[0])) if params else 10
    precision = precision or 10  # DECIMAL(0): the default precision
    scale = _int(params[1]) if len(params) > 1 else 0
    suffix = (" unsigned" if spec.unsigned else "") + (" zerofill" if spec.zerofill else "")
    return Column("", "decimal", f"decimal({precision},{scale}){suffix}", unsigned=spec.unsigned,
                  precision=precision, scale=scale)  # fmt: skip


def _floating(head: str, params: list[str], spec: TypeSpec) -> Column:
    double = head in ("DOUBLE", "REAL", "FLOAT8")
    if head == "FLOAT" and len(params) == 1:
        double = int(Decimal(params[0])) > 24  # FLOAT(p): a precision in bits
        params = []
    name = "double" if double else "float"
    suffix = (" unsigned" if spec.unsigned else "") + (" zerofill" if spec.zerofill else "")
    if len(params) == 2 and _int(params[0]) > 0:  # DOUBLE(0,0): no precision given, as DOUBLE
        return Column("", name, f"{name}({params[0]},{params[1]}){suffix}", unsigned=spec.unsigned,
                      precision=_int(params[0]), scale=_int(params[1]))  # fmt: skip
    return Column("", name, name + suffix, unsigned=spec.unsigned, precision=22 if double else 12)


def members_column(kind: str, members: list[str | bytes], charset: str = "utf8mb4") -> Column:
    # the server cuts trailing spaces of members and reads hex members in the column's charset
    values = tuple((m if isinstance(m, str) else decoded(m, charset)).rstrip(" ") for m in members)
    quoted = ",".join("'" + v.replace("'", "''") + "'" for v in values)
    # information_schema's length: the longest member (ENUM), all members joined by commas (SET)
    longest = max((len(v) for v in values), default=0)
    length = longest if kind == "enum" else sum(len(v) for v in values) + max(0, len(values) - 1)
    return Column("", kind, f"{kind}({quoted})", length=length, values=values)


_LOBS = ("TINYBLOB", "BLOB", "MEDIUMBLOB", "LONGBLOB", "TINYTEXT", "TEXT", "MEDIUMTEXT", "LONGTEXT")


def _string(words: list[str], params: list[str], spec: TypeSpec) -> Column:
    head = words[0]
    length = _int(params[0]) if params else None
    if length == 0 and head in _LOBS:
        length = None  # TEXT(0), BLOB(0): as TEXT and BLOB
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
    varying = (
        head in ("VARCHAR", "NVARCHAR", "VARCHARACTER")
        or "VARYING" in words
        or words[-1] in ("VARCHAR", "VARCHARACTER")
    )
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


def with_charset(column: Column, spec: TypeSpec, table: tuple[str, str], charsets: Charsets) -> Column:
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
