"""The binlog between a chunk's watermarks applied to the rows its SELECT read (step 4 of the
snapshot's chunk read): by primary key, and only for keys in the chunk's range as the server
compares them (a text key in the column's collation, like the splitter and the SELECT).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import pymysql

from binlake.events import Column, DataChange
from binlake.schema.type_mapping import select_converter
from binlake.source.binlog.event_rows import Gap, UnreplicableChangeError
from binlake.source.binlog.row_decoder import ABSENT
from binlake.source.chunks.splitter import ChunkRange
from binlake.source.server.collation import collated

#: A row as a tuple in the table's column order.
Row = tuple[Any, ...]


def apply_by_key(
    rows: list[Row],
    changes: Sequence[DataChange],
    names: Sequence[str],
    primary_key: Sequence[str],
    key_column: str,
    in_range: RangeTest,
) -> list[Row]:
    positions = [names.index(k) for k in primary_key]
    buffer: dict[Row, Row] = {tuple(r[i] for i in positions): r for r in rows}
    for change in changes:
        old: Row | None = None
        if change.before is not None and in_range(change.before[key_column]):
            old = buffer.pop(tuple(change.before[k] for k in primary_key), None)
        if change.after is not None and in_range(change.after[key_column]):
            after = tuple(change.after[n] for n in names)
            if ABSENT in after:  # an image without every column: the others keep the row's values
                after = _completed(change, after, old)
            buffer[tuple(change.after[k] for k in primary_key)] = after
    return list(buffer.values())


def _completed(change: DataChange, after: Row, old: Row | None) -> Row:
    """An update's after image that lacks columns, completed from the row it replaces (read by the
    SELECT or an earlier change); a row from outside the chunk cannot be: read the chunk again."""
    if old is None or ABSENT in old:
        raise UnreplicableChangeError(
            Gap(
                change.table,
                "an update whose row image lacks columns (`binlog_row_image` NOBLOB or MINIMAL) of a row "
                "the chunk does not hold",
                "set `binlog_row_image = 'FULL'` in the writing sessions",
                change.offset,
                change.timestamp,
            )
        )
    return tuple(o if a is ABSENT else a for a, o in zip(after, old, strict=True))


class RangeTest:
    """Whether a (normalised) key value lies in a chunk's range.

    Text keys are compared by the server in the column's collation — the same rule the splitter
    and the SELECT use — since Python's string order differs from e.g. ``utf8mb4_general_ci``.
    Other keys compare in Python after the same normalisation as the rows.
    """

    def __init__(self, conn: pymysql.Connection[Any], column: Column, chunk_range: ChunkRange) -> None:
        self.conn = conn
        self.column = column
        self.range = chunk_range
        convert = select_converter(column)
        self.start = chunk_range.start if convert is None else convert(chunk_range.start)
        self.end = chunk_range.end if convert is None else convert(chunk_range.end)
        self._text_results: dict[Any, bool] = {}

    def prepare(self, values: Iterable[Any]) -> None:
        """Ask the server about all text values at once (one round trip per 500 values)."""
        if not self.column.is_text or self.range.is_all:
            return
        pending = sorted({v for v in values if v is not None and v not in self._text_results}, key=repr)
        for i in range(0, len(pending), 500):
            self._ask_server(pending[i : i + 500])

    def __call__(self, value: Any) -> bool:
        if self.range.is_all:
            return True
        if value is None:
            return self.range.start is None
        if self.column.is_text:
            if value not in self._text_results:
                self._ask_server([value])
            return self._text_results[value]
        return (self.start is None or value >= self.start) and (self.end is None or value < self.end)

    def _ask_server(self, values: Sequence[Any]) -> None:
        typed = collated(self.column)
        tests, params = [], []
        for i, value in enumerate(values):
            conditions = []
            if self.range.start is not None:
                conditions.append(f"{typed} >= {typed}")
                params += [value, self.range.start]
            if self.range.end is not None:
                conditions.append(f"{typed} < {typed}")
                params += [value, self.range.end]
            tests.append(f"SELECT {i}, {' AND '.join(conditions)}")
        with self.conn.cursor() as cur:
            cur.execute(" UNION ALL ".join(tests), params)
            for index, inside in cur.fetchall():
                self._text_results[values[int(index)]] = bool(inside)
