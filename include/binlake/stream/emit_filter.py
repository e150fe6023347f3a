"""The snapshot filter (Flink CDC's ``shouldEmit``, seed 003): drop what a chunk already holds.

The stream starts at the smallest high watermark of the snapshot's chunks, so it meets changes
the snapshot already read. A change of table T at position p is applied only if p is after T's
largest high watermark, or if its chunk key lies in chunk c and p is after c's high watermark.
Once the stream is past every table's largest high watermark the filter passes everything.

Chunk keys compare like the splitter compared them: text keys on the server, in the column's
collation (``source.collation``); other keys in Python, normalised like the rows.
"""

from __future__ import annotations

import bisect
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from binlake.config import SourceConfig
from binlake.events import Column, CreateTable
from binlake.schema.type_mapping import select_converter
from binlake.source.server.collation import chunk_indexes
from binlake.source.server.connection import connect
from binlake.state.store import StoredPlan
from binlake.stream.records import values


@dataclass(frozen=True)
class _TableChunks:
    column: Column
    starts: list[Any]
    """Chunk borders after the first chunk, normalised like row values (sorted)."""
    raw_starts: list[Any]
    """The same borders as stored (what the server compares)."""
    high_watermarks: list[int]
    """Each chunk's high watermark as a ``records.position``."""
    last: int
    """The table's largest high watermark."""


class SnapshotFilter:
    """Decides which changes the stream applies while it is still inside the snapshot's range."""

    def __init__(
        self, source: SourceConfig, plans: Sequence[StoredPlan], schemas: dict[str, CreateTable]
    ) -> None:
        self.source = source
        self.tables: dict[str, _TableChunks] = {}
        for plan in plans:
            chunks = sorted(plan.chunks, key=lambda c: c.chunk.chunk_id)
            marks = [c.high_watermark for c in chunks]
            if not chunks or any(m is None for m in marks) or plan.table.name not in schemas:
                continue
            column = schemas[plan.table.name].column(plan.key_column)
            convert = select_converter(column) or (lambda v: v)
            raw = [c.chunk.range.start for c in chunks[1:]]
            positions = [m.packed for m in marks if m is not None]
            self.tables[plan.table.name] = _TableChunks(
                column, [convert(v) for v in raw], raw, positions, max(positions)
            )

    def passes_all(self, table: str, at_least: int) -> bool:
        """Whether every change of ``table`` at or after position ``at_least`` is applied."""
        chunks = self.tables.get(table)
        return chunks is None or at_least > chunks.last

    def holds(self, table: str, at: int) -> bool:
        """Whether the snapshot holds whatever happened to ``table`` at position ``at``: every
        chunk was read after it (a chunk whose watermarks enclose a change it cannot replay is
        read again, so a finished chunk was read wholly before or wholly after it)."""
        chunks = self.tables.get(table)
        return chunks is not None and min(chunks.high_watermarks) >= at

    def keep(self, table: str, rows: pa.Table) -> pa.Table:
        """The changes of ``rows`` (one table's change table, or any table with ``at`` and a
        ``row`` struct holding the chunk key) that the snapshot does not hold."""
        chunks = self.tables.get(table)
        if chunks is None or rows.num_rows == 0:
            return rows
        inside = pc.less_equal(rows.column("at"), chunks.last)
        candidates = pc.indices_nonzero(inside).to_pylist()
        if not candidates:
            return rows
        keys = values(rows, chunks.column.name, pa.array(candidates, pa.int64()))
        indexes = self._chunk_indexes(chunks, keys)
        at = rows.column("at").take(candidates).to_pylist()
        keep = pc.invert(inside).to_pylist()
        for row, chunk, p in zip(candidates, indexes, at, strict=True):
            keep[row] = p > chunks.high_watermarks[chunk]
        return rows.filter(pa.array(keep, pa.bool_()))

    def _chunk_indexes(self, chunks: _TableChunks, values: list[Any]) -> list[int]:
        if chunks.column.is_text and chunks.raw_starts:
            with contextlib.closing(connect(self.source)) as conn:
                return chunk_indexes(conn, chunks.column, values, chunks.raw_starts)
        # NULL keys live in the first chunk (its condition is `k < end OR k IS NULL`).
        return [0 if v is None else bisect.bisect_right(chunks.starts, v) for v in values]
