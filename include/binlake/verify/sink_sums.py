"""Chunk checksums of the sink, rolled forward along the binlog to each source sum's position.

The sink table is pinned first — one snapshot and the binlog offset ``O`` it holds the source at
(``quality.checkpoint.sink_offset``) — and read once, every row hashed (``verify.canonical``) and
counted in the chunk its key lies in. The source's sums are read after, at positions ``P ≥ O``. The
binlog between says how the source moved from ``O`` to each ``P``: each row change removes its
before image and adds its after image (full images: ``binlog_row_image=FULL``), which holds for
tables with and without a primary key (``quality.reconcile.changes_after`` reads them). Changes
the snapshot's chunks already hold are dropped as the stream drops them (``stream.emit_filter``).
So the sink's sum rolled forward to ``P`` equals the source's sum at ``P`` exactly when the sink
held the source at ``O`` — whether the stream runs meanwhile or not, and without waiting for it.
"""

from __future__ import annotations

import bisect
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask, Table

from binlake.events import Column, CreateTable
from binlake.offsets import BinlogOffset
from binlake.schema.routes import SOURCE_TABLE_COLUMN
from binlake.schema.transforms import Transform
from binlake.schema.type_mapping import select_converter
from binlake.sink.history.scd2 import CURRENT, current
from binlake.sink.history.soft_delete import DELETED, live
from binlake.sink.keys.table_keys import deleted_positions
from binlake.source.chunks.splitter import ChunkRange
from binlake.stream.records import images
from binlake.verify.canonical import Hashing, row_hashes
from binlake.verify.row_hashes import FileHashes, RowHashCache, hash_spec

log = logging.getLogger(__name__)

Sums = tuple[np.ndarray[Any, np.dtype[np.int64]], np.ndarray[Any, np.dtype[np.uint64]]]


@dataclass(frozen=True)
class PinnedSink:
    """One snapshot of a sink table and the binlog offset it holds the source at."""

    table: Table
    snapshot_id: int | None
    offset: BinlogOffset


class ChunkIndex:
    """Which of some key ranges (sorted, disjoint) a key lies in (-1: none); NULL keys lie in a
    range without a start, as the chunk's SQL condition puts them."""

    def __init__(self, column: Column, ranges: Sequence[ChunkRange]) -> None:
        self.ranges = list(ranges)
        convert = select_converter(column) or (lambda v: v)
        self._starts = [None if r.start is None else convert(r.start) for r in self.ranges]
        self._ends = [None if r.end is None else convert(r.end) for r in self.ranges]
        self._open_start = bool(self._starts) and self._starts[0] is None
        # The starts to search (a range without a start takes what lies below the first one).
        self._lows = self._starts[1:] if self._open_start else self._starts
        self._integral = column.is_integral
        self._unsigned = column.unsigned

    def __len__(self) -> int:
        return len(self.ranges)

    def of(self, keys: pa.Array | pa.ChunkedArray) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The range of each key (-1: none)."""
        dtype = self._integer_dtype(keys.type)
        if dtype is not None:
            return self._of_integers(keys, dtype)
        return np.array([self._of_value(v) for v in keys.to_pylist()], dtype=np.int64)

    def _integer_dtype(self, key_type: pa.DataType) -> type[np.integer[Any]] | None:
        """The NumPy type the keys and bounds are compared in, if they are integers: a BIGINT
        UNSIGNED key (a ``decimal(20, 0)`` in the sink) as ``uint64``, others as ``int64``."""
        if not self._integral:
            return None
        if pa.types.is_integer(key_type):
            return np.int64
        if pa.types.is_decimal(key_type) and key_type.scale == 0 and key_type.precision <= 20:
            return np.uint64 if self._unsigned else None
        return None

    def _of_value(self, value: Any) -> int:
        if value is None:
            return 0 if self._open_start else -1
        at = bisect.bisect_right(self._lows, value) - (0 if self._open_start else 1)
        if at < 0:
            return -1
        end = self._ends[at]
        return at if end is None or value < end else -1

    def _of_integers(
        self, keys: pa.Array | pa.ChunkedArray, dtype: type[np.integer[Any]]
    ) -> np.ndarray[Any, np.dtype[np.int64]]:
        lowest = np.iinfo(dtype).min
        starts = np.array([lowest if s is None else int(s) for s in self._starts], dtype=dtype)
        ends = np.array([0 if e is None else int(e) for e in self._ends], dtype=dtype)
        open_end = np.array([e is None for e in self._ends], dtype=bool)
        nulls = pc.is_null(keys).to_numpy(zero_copy_only=False)
        values = pc.cast(pc.fill_null(keys, 0), pa.from_numpy_dtype(dtype)).to_numpy(zero_copy_only=False)
        at = np.searchsorted(starts, values, side="right") - 1
        near = np.clip(at, 0, None)
        inside = (at >= 0) & (open_end[near] | (values < ends[near]))
        found = np.where(inside, at, -1)
        return np.where(nulls, 0 if self._open_start else -1, found).astype(np.int64)


#: Sums of a pinned sink table's rows (``sink_sums``), or of the state they stand for.
SumsReader = Callable[[PinnedSink, CreateTable, Sequence[Column], str, ChunkIndex, bool], Sums]


def sink_sums(
    pinned: PinnedSink,
    schema: CreateTable,
    columns: Sequence[Column],
    key: str,
    chunks: ChunkIndex,
    routed: bool,
    hashes_in: Path | None = None,
    hashing: Hashing = "md5",
) -> Sums:
    """Rows and hash sums per chunk of ``schema.table``'s rows in the pinned snapshot
    (``hashes_in``: where each data file's row hashes are kept between verifications,
    ``verify.row_hashes``; None: every row hashed anew; ``hashing``: as the server hashes)."""
    counts, totals = no_sums(len(chunks))
    names = [c.name for c in columns]
    present = set(pinned.table.schema().column_names)
    # Soft deletes: the live rows are the source's; a history: its current versions.
    counted = [c for c in (DELETED, CURRENT) if c in present]
    names += counted
    if hashes_in is not None:
        source = schema.table.name if routed else None
        spec = hash_spec(columns, key, counted, source, hashing)
        cache = RowHashCache(hashes_in, pinned.table.metadata.table_uuid.hex, spec)
        for keys, hashes in _cached_rows(pinned, names, cache, key, columns, source, hashing):
            add_rows(counts, totals, chunks.of(keys), hashes, 1)
        log.info("verify %s: the row hashes of %d data files kept, %d hashed", ".".join(pinned.table.name()),
                 cache.hits, cache.misses)  # fmt: skip
        cache.forget_others()
        return counts, totals
    for rows in pinned_rows(pinned, schema, names, routed):
        rows = current(live(rows))
        if rows.num_rows:
            add_rows(counts, totals, chunks.of(rows.column(key)), row_hashes(rows, columns, hashing), 1)
    return counts, totals


def _cached_rows(
    pinned: PinnedSink,
    names: Sequence[str],
    cache: RowHashCache,
    key: str,
    columns: Sequence[Column],
    source: str | None,
    hashing: Hashing,
) -> Iterator[tuple[pa.Array, np.ndarray[Any, np.dtype[np.uint64]]]]:
    """The keys and hashes of the pinned snapshot's live rows that count, a data file at a time:
    each file's hashes from ``cache`` (or hashed, and kept), its position deletes applied."""
    if pinned.snapshot_id is None:
        return
    table = pinned.table
    wanted = (
        [*names, SOURCE_TABLE_COLUMN] if source is not None and SOURCE_TABLE_COLUMN not in names else names
    )
    read_schema = table.schema().select(*wanted)
    tasks = list(table.scan(snapshot_id=pinned.snapshot_id).plan_files())
    deleted = deleted_positions(table, tasks)
    for task in tasks:
        found = cache.get(task.file)
        if found is None:
            # The file alone, without its deletes: row numbers are file positions.
            rows = ArrowScan(table.metadata, table.io, read_schema, AlwaysTrue()).to_table(
                tasks=[FileScanTask(task.file)]
            )
            counts = _counted(rows, source)
            kept = rows.filter(counts)
            positions = np.flatnonzero(np.asarray(counts.to_numpy(zero_copy_only=False), bool))
            hashes = row_hashes(kept, columns, hashing)
            found = FileHashes(positions, kept.column(key).combine_chunks(), hashes)
            cache.put(task.file, found)
        gone = deleted.get(task.file.file_path)
        if gone is None:
            yield found.keys, found.hashes
            continue
        live_rows = ~np.isin(found.positions, gone)
        yield found.keys.filter(pa.array(live_rows)), found.hashes[live_rows]


def _counted(rows: pa.Table, source: str | None) -> pa.Array:
    """Which of a data file's rows count: a routed ``source``'s, live (soft deletes), current (a
    history's versions)."""
    mask = pa.array(np.ones(rows.num_rows, bool))
    if source is not None:
        mask = pc.and_(mask, pc.fill_null(pc.equal(rows.column(SOURCE_TABLE_COLUMN), source), False))
    if DELETED in rows.column_names:
        mask = pc.and_(mask, pc.invert(pc.fill_null(rows.column(DELETED), False)))
    if CURRENT in rows.column_names:
        mask = pc.and_(mask, pc.fill_null(rows.column(CURRENT), False))
    return mask


def no_sums(chunks: int) -> Sums:
    """Zero rows in each of ``chunks`` chunks."""
    return np.zeros(chunks, dtype=np.int64), np.zeros(chunks, dtype=np.uint64)


def pinned_rows(
    pinned: PinnedSink, schema: CreateTable, names: Sequence[str], routed: bool
) -> Iterator[pa.Table]:
    """The pinned snapshot's rows of ``schema.table`` (columns ``names``), a batch at a time; of a
    shared sink table (``routed``), those its source table wrote."""
    if pinned.snapshot_id is None:
        return
    names = [*names, SOURCE_TABLE_COLUMN] if routed and SOURCE_TABLE_COLUMN not in names else list(names)
    scan = pinned.table.scan(snapshot_id=pinned.snapshot_id, selected_fields=tuple(names))
    for batch in scan.to_arrow_batch_reader():
        rows = pa.Table.from_batches([batch])
        if routed:
            rows = rows.filter(pc.equal(rows.column(SOURCE_TABLE_COLUMN), schema.table.name))
        if rows.num_rows:
            yield rows


def add_rows(
    counts: np.ndarray[Any, Any],
    totals: np.ndarray[Any, Any],
    at: np.ndarray[Any, Any],
    hashes: np.ndarray[Any, Any],
    sign: int | np.ndarray[Any, Any],
) -> None:
    """Add (``sign`` 1) or remove (-1) rows of hash ``hashes`` to the chunks ``at`` (-1: none)."""
    inside = at >= 0
    signs = np.broadcast_to(np.asarray(sign, dtype=np.int64), at.shape)[inside]
    hashes = hashes[inside]
    # Mod 2^64 on both sides: removing a row adds its two's complement.
    signed = np.where(signs > 0, hashes, np.uint64(0) - hashes)
    np.add.at(counts, at[inside], signs)
    np.add.at(totals, at[inside], signed)


def rolled_forward(
    sums: Sums,
    changes: pa.Table,
    columns: Sequence[Column],
    key: str,
    chunks: ChunkIndex,
    until: Sequence[int],
    transform: Transform | None = None,
    hashing: Hashing = "md5",
) -> Sums:
    """The sink's sums moved along ``changes`` up to each chunk's position (``until``, as
    ``records.position``; ``transform``: the table's, which the images go through; ``hashing``:
    as the server hashes)."""
    counts, totals = sums[0].copy(), sums[1].copy()
    if changes.num_rows == 0:
        return counts, totals
    rows = images(changes)
    if transform is not None:  # the sink holds the projection of the rows the filter keeps
        kept = transform.keep(rows)
        changes, rows = changes.filter(kept), transform.project(rows.filter(kept))
    at = chunks.of(rows.column(key))
    limit = np.array(until, dtype=np.int64)
    due = (at >= 0) & (changes.column("at").to_numpy() <= limit[np.clip(at, 0, None)])
    hashes = row_hashes(rows, columns, hashing)
    signs = changes.column("delta").to_numpy().astype(np.int64)
    add_rows(counts, totals, np.where(due, at, -1), hashes, signs)
    return counts, totals
