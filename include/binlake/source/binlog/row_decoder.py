"""Rows events decoded straight into normalised row tuples, one compiled decoder per table map.

python-mysql-replication decodes a row column by column through generic code (a dict per row,
a bitmap lookup and a buffered read per value): ~30 µs for a six-column row, which made decoding
the stream's bound. This module keeps the library for what it does well — transport, event
framing, table maps with their metadata — and decodes the row data itself: each column gets a
small reader chosen once per table map (``column_codecs``), and rows go straight to the tuple
``RowConverter`` would have produced from the library's values (same types, same zero-date and
SET rules).

Lean mode (the stream's): images whose only use is their key — the before image of an update and
the image of a delete, for tables with a primary key — decode only the key columns and skip the
rest by their lengths.

Events without every column (a session's ``binlog_row_image`` NOBLOB or MINIMAL, MariaDB's
FULL_NODUP) give ``ABSENT`` for the columns they lack — never a NULL the source does not hold;
MySQL's partial JSON updates (``binlog_row_value_options=PARTIAL_JSON``) have their diffs applied
to the before image's document. Pre-5.6 temporal types are left to the library:
``RowDecoder.supported`` says so, and the caller falls back per event.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE

from binlake.events import CreateTable
from binlake.schema.type_mapping import RowConverter
from binlake.source.binlog import mysql_json
from binlake.source.binlog.column_codecs import ZeroDates, column_codec


class TableMapDecoder:
    """What binlake's decoders share: the table map they read, and which of its events they take
    (``supported``: every column is of a type they read; events must carry every column —
    ``binlog_row_image`` FULL — the library decodes the others)."""

    supported = False

    def __init__(self, table: CreateTable, wire: Sequence[Any], converter: RowConverter) -> None:
        self.wire = wire
        self.converter = converter
        self.width = len(table.columns)
        self._all_present = b"\xff" * (self.width // 8) + (
            bytes([(1 << (self.width % 8)) - 1]) if self.width % 8 else b""
        )

    @property
    def all_present(self) -> bytes:
        """The columns-present bitmap of an image that carries every column."""
        return self._all_present

    def supports(self, present: bytes, *more: bytes) -> bool:
        """Whether this decoder reads events with these columns-present bitmaps."""
        return self.supported and all(p == self._all_present for p in (present, *more))


class _Absent:
    """A column a row image does not carry (``binlog_row_image`` NOBLOB or MINIMAL): its value is
    whatever the row held before (an update) or the column's default (an insert), not NULL."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"

    def __reduce__(self) -> str:
        return "ABSENT"  # one instance across pickling (Spark ships rows between processes)


ABSENT = _Absent()

#: ``binlog_row_value_options`` bit of an after image with partial JSON updates.
_PARTIAL_JSON_UPDATES = 1


def present_columns(bitmap: bytes, width: int) -> list[int]:
    """The column positions a columns-present bitmap holds."""
    return [i for i in range(width) if bitmap[i >> 3] >> (i & 7) & 1]


class RowDecoder(TableMapDecoder):
    """Decodes the row data of one table map's rows events.

    Args:
        table: the schema the rows were written with (column i of the table map is column i here).
        wire: the table map's columns (python-mysql-replication's, with their metadata).
        converter: the table's converter, whose ``zero_dates`` counter this decoder keeps up.
        key_at: positions of the key columns, decoded in lean images.
    """

    def __init__(
        self, table: CreateTable, wire: Sequence[Any], converter: RowConverter, key_at: Sequence[int]
    ) -> None:
        super().__init__(table, wire, converter)
        self._zero = ZeroDates()
        codecs_ = [column_codec(c, w, self._zero) for c, w in zip(table.columns, wire, strict=False)]
        self.supported = len(wire) == self.width and all(c is not None for c in codecs_)
        self._readers = [c[0] for c in codecs_ if c is not None]
        self._skippers = [c[1] for c in codecs_ if c is not None]
        keys = set(key_at)
        pairs = zip(self._readers, self._skippers, strict=True)
        self._lean = [(i in keys, read, skip) for i, (read, skip) in enumerate(pairs)]
        self._null_bytes = (self.width + 7) // 8
        self._json = [i for i, w in enumerate(wire) if w.type == FIELD_TYPE.JSON]

    def supports(self, present: bytes, *more: bytes) -> bool:
        """Every event of a table map whose column types it reads (all columns present or not)."""
        return self.supported

    def images(
        self,
        data: bytes,
        update: bool,
        lean_first: bool,
        bitmaps: Sequence[bytes] = (),
        partial_json: bool = False,
    ) -> list[tuple[Any, ...] | None]:
        """The row images in ``data`` (an update's come in before/after pairs).

        ``lean_first``: decode only the key of each first image (an update's before, a delete's).
        ``bitmaps``: the event's columns-present bitmaps (an update's second is its after images');
        columns they lack are ``ABSENT``. ``partial_json``: a MySQL PARTIAL_UPDATE_ROWS_EVENT (after
        images may carry JSON diffs instead of documents).
        """
        if (not bitmaps or all(b == self._all_present for b in bitmaps)) and not partial_json:
            return self._full_images(data, update, lean_first)
        before = present_columns(bitmaps[0], self.width)
        after = present_columns(bitmaps[-1], self.width) if update else before
        images: list[tuple[Any, ...] | None] = []
        pos, end = 0, len(data)
        while pos < end:
            first, pos = self._sparse_row(data, pos, before)
            images.append(first)
            if update:
                second, pos = self._sparse_row(data, pos, after, first if partial_json else None)
                images.append(second)
        return images

    def _full_images(self, data: bytes, update: bool, lean_first: bool) -> list[tuple[Any, ...] | None]:
        images: list[tuple[Any, ...] | None] = []
        pos, end, first = 0, len(data), True
        while pos < end:
            lean = lean_first and first
            image, pos = self._lean_row(data, pos) if lean else self._row(data, pos)
            images.append(image)
            if update:
                first = not first
        return images

    def _row(self, buf: bytes, pos: int) -> tuple[tuple[Any, ...], int]:
        null_end = pos + self._null_bytes
        nulls = int.from_bytes(buf[pos:null_end], "little")
        pos = null_end
        values: list[Any] = []
        append = values.append
        if nulls:
            for i, read in enumerate(self._readers):
                if nulls >> i & 1:
                    append(None)
                else:
                    value, pos = read(buf, pos)
                    append(value)
        else:
            for read in self._readers:
                value, pos = read(buf, pos)
                append(value)
        zero = self._zero
        if zero.seen:
            zero.seen = False
            self.converter.zero_dates += 1
        return tuple(values), pos

    def _sparse_row(
        self, buf: bytes, pos: int, present: list[int], before: tuple[Any, ...] | None = None
    ) -> tuple[tuple[Any, ...], int]:
        """A row image of the ``present`` columns (the others ``ABSENT``). ``before``: the before
        image of a partial JSON update's after image (its diffs apply to that document)."""
        partial: set[int] = set()
        if before is not None:
            options, pos = _packed_int(buf, pos)
            if options & _PARTIAL_JSON_UPDATES:
                size = (len(self._json) + 7) // 8
                bits = buf[pos : pos + size]
                pos += size
                partial = {c for n, c in enumerate(self._json) if bits[n >> 3] >> (n & 7) & 1}
        null_end = pos + (len(present) + 7) // 8
        nulls = int.from_bytes(buf[pos:null_end], "little")
        pos = null_end
        values: list[Any] = [ABSENT] * self.width
        for n, i in enumerate(present):
            if nulls >> n & 1:
                values[i] = None
            elif i in partial:
                values[i], pos = self._patched_json(buf, pos, i, before)
            else:
                values[i], pos = self._readers[i](buf, pos)
        zero = self._zero
        if zero.seen:
            zero.seen = False
            self.converter.zero_dates += 1
        return tuple(values), pos

    def _patched_json(
        self, buf: bytes, pos: int, column: int, before: tuple[Any, ...] | None
    ) -> tuple[Any, int]:
        """A partially updated JSON column: the before image's document with the diffs applied
        (``ABSENT`` when the before image does not carry the document: MINIMAL images)."""
        size = self.wire[column].length_size
        length = int.from_bytes(buf[pos : pos + size], "little")
        diffs = (
            buf[pos : pos + size + length]
            if size == 4
            else struct.pack("<I", length) + buf[pos + size : pos + size + length]
        )
        end = pos + size + length
        old: Any = before[column] if before is not None else ABSENT
        if not isinstance(old, str):
            return ABSENT, end
        return mysql_json.render(mysql_json.apply_diffs(mysql_json.parse_text(old), diffs)), end

    def _lean_row(self, buf: bytes, pos: int) -> tuple[tuple[Any, ...], int]:
        null_end = pos + self._null_bytes
        nulls = int.from_bytes(buf[pos:null_end], "little")
        pos = null_end
        values: list[Any] = []
        append = values.append
        for i, (key, read, skip) in enumerate(self._lean):
            if nulls >> i & 1:
                append(None)
            elif key:
                value, pos = read(buf, pos)
                append(value)
            else:
                pos = skip(buf, pos)
                append(None)
        self._zero.seen = False  # a skipped image's dates do not count: nothing of it is written
        return tuple(values), pos


def _packed_int(buf: bytes, pos: int) -> tuple[int, int]:
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    width = {0xFC: 2, 0xFD: 3, 0xFE: 8}[first]
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "little"), pos + 1 + width
