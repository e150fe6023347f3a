"""The chunk splitter's task is to split a table into chunks: disjoint, complete key ranges.

Flink CDC's algorithm (seed 003), with two changes that matter for correctness here:

- Every comparison between key values runs on the server, in the column's own collation: a
  case-insensitive or PAD SPACE collation orders and equates strings differently from Python, and
  a border decided in Python could lose or duplicate rows. Only integral keys (whose order is the
  same everywhere) are stepped in Python, for the even split.
- A chunk key that is not unique (a configured chunk key on a table without primary key) can hold
  the same value across more than ``chunk_size`` rows; the "next end equals start" step moves past
  it, so such a chunk is larger than ``chunk_size`` but never empty or overlapping. NULLs of such a
  column belong to the first chunk, ``(-inf, end)``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pymysql

from binlake.config import SourceConfig
from binlake.errors import BinlakeError
from binlake.events import Column, CreateTable, TableId, quote

log = logging.getLogger(__name__)

DEFAULT_FACTOR_BOUNDS = (0.05, 1000.0)
#: Rows per chunk when sized by bytes (``source.chunk_bytes``): at least this many (a chunk's query
#: and watermarks cost the same at any size), and at most that many (a very narrow table).
CHUNK_ROWS = (1024, 65536)
UNKNOWN_LENGTH_ROWS = 8096
#: Below this estimate the rows are counted: InnoDB recomputes its estimate in the background, and two
#: splits of an unchanged table (a verify and its ``--repair``) must cut the same chunks.
COUNTED_BELOW_ROWS = 1 << 18

Strategy = Literal["single", "even", "uneven"]


class ChunkKeyError(BinlakeError):
    """A table cannot be split: no primary key and no usable chunk key."""


@dataclass(frozen=True)
class ChunkRange:
    """A half-open key range ``[start, end)``; ``None`` means unbounded on that side."""

    start: Any = None
    end: Any = None

    def __post_init__(self) -> None:
        if self.start is not None and self.end is not None and self.start == self.end:
            raise ValueError(f"Chunk start {self.start!r} must not equal chunk end {self.end!r}")

    @classmethod
    def all(cls) -> ChunkRange:
        return cls(None, None)

    @property
    def is_all(self) -> bool:
        return self.start is None and self.end is None

    def __str__(self) -> str:
        start = "-inf" if self.start is None else repr(self.start)
        end = "+inf" if self.end is None else repr(self.end)
        return f"[{start}, {end})" if self.start is not None else f"({start}, {end})"


@dataclass(frozen=True)
class ChunkId:
    """A chunk's identity wherever it is stored, selected or committed: ``db.orders#17``."""

    table: TableId
    index: int

    def __str__(self) -> str:
        return f"{self.table.name}#{self.index}"

    @classmethod
    def parse(cls, text: str) -> ChunkId:
        table, _, index = text.rpartition("#")
        return cls(TableId.parse(table), int(index))


@dataclass(frozen=True)
class Chunk:
    """One chunk of one table: the unit a snapshot task reads and commits."""

    table: TableId
    chunk_id: int
    key_column: str
    range: ChunkRange

    @property
    def id(self) -> ChunkId:
        return ChunkId(self.table, self.chunk_id)

    @property
    def name(self) -> str:
        """``orders#17``: how logs and errors name the chunk."""
        return f"{self.table.table}#{self.chunk_id}"

    def where(self) -> tuple[str, list[Any]]:
        """The SQL condition (and its parameters) that selects exactly this chunk's rows."""
        return range_condition(quote(self.key_column), self.range)


def range_condition(key_sql: str, chunk: ChunkRange) -> tuple[str, list[Any]]:
    """``key >= start AND key < end``; NULL keys go to the first chunk only."""
    if chunk.is_all:
        return "1 = 1", []
    if chunk.start is None:
        return f"({key_sql} < %s OR {key_sql} IS NULL)", [chunk.end]
    if chunk.end is None:
        return f"{key_sql} >= %s", [chunk.start]
    return f"{key_sql} >= %s AND {key_sql} < %s", [chunk.start, chunk.end]


@dataclass(frozen=True)
class SplitPlan:
    """How one table was split, and why."""

    table: TableId
    key_column: str
    strategy: Strategy
    reason: str
    chunks: tuple[Chunk, ...]
    min_key: Any
    max_key: Any
    estimated_rows: int


def split_evenly(min_key: int, max_key: int, step: int) -> list[ChunkRange]:
    """Integral keys in ``step``-wide ranges: ``(-inf, min+step), [min+step, min+2·step) … [x, +inf)``.

    Pure arithmetic on Python ints, so keys near the ends of BIGINT and BIGINT UNSIGNED are exact.
    """
    if step < 1:
        raise ValueError(f"step must be at least 1, got {step}")
    if min_key + step > max_key:
        return [ChunkRange.all()]
    ranges: list[ChunkRange] = []
    start: int | None = None
    end = min_key + step
    while end <= max_key:
        ranges.append(ChunkRange(start, end))
        start, end = end, end + step
    ranges.append(ChunkRange(start, None))
    return ranges


def distribution_factor(min_key: int, max_key: int, rows: int) -> float:
    """Key span per row: 1.0 for a dense auto-increment key, large for a sparse one."""
    if rows <= 0:
        return float("inf")
    return (max_key - min_key + 1) / rows


def _joinable(held: float, size: float, chunk_size: int) -> bool:
    """Whether a range of ``size`` estimated rows joins the ranges before it (``held`` rows): both
    well short of a chunk (sparse ranges, e.g. halves, make one), never a chunk and a remainder."""
    short = 0.75 * chunk_size
    return held < short and size < short and held + size <= 1.5 * chunk_size


def choose_key_column(table: CreateTable, configured: str | None) -> Column:
    """The first primary-key column, or the configured chunk key.

    Raises:
        ChunkKeyError: the configured column does not exist, or there is neither.
    """
    if configured is not None:
        try:
            return table.column(configured)
        except KeyError:
            raise ChunkKeyError(
                f"Cannot split `{table.table}` by `{configured}`: the table has no such column "
                f"(columns: {', '.join(table.column_names)}). Fix `source.chunk_key_columns`."
            ) from None
    if table.primary_key:
        return table.column(table.primary_key[0])
    raise ChunkKeyError(
        f"Cannot split `{table.table}`: it has no primary key and no chunk key. Fix: set "
        f'`source.chunk_key_columns: {{"{table.table}": <column>}}` or exclude the table.'
    )


class ChunkSplitter:
    """Splits tables into chunks over one connection (queries only; never a lock).

    Args:
        conn: a connection to the source.
        chunk_size: target rows per chunk; None: as many as hold ``chunk_bytes`` at each table's
            average row length (``CHUNK_ROWS`` bound it).
        chunk_bytes: target bytes per chunk when ``chunk_size`` is None.
        factor_bounds: distribution factors within these bounds get the even split.
        progress: called with (table, chunks so far) while an uneven split runs.
    """

    def __init__(
        self,
        conn: pymysql.Connection[Any],
        chunk_size: int | None,
        factor_bounds: tuple[float, float] = DEFAULT_FACTOR_BOUNDS,
        progress: Callable[[TableId, int], None] | None = None,
        chunk_bytes: int = 8 << 20,
    ) -> None:
        if chunk_size is not None and chunk_size < 1:
            raise ValueError(f"chunk_size must be at least 1, got {chunk_size}")
        self.conn = conn
        self.configured_size = chunk_size
        self.chunk_bytes = chunk_bytes
        self.chunk_size = chunk_size or CHUNK_ROWS[1]  # the table's own, once ``split`` reads it
        self.factor_bounds = factor_bounds
        self.progress = progress

    @classmethod
    def of(
        cls,
        conn: pymysql.Connection[Any],
        source: SourceConfig,
        chunk_size: int | None = None,
        progress: Callable[[TableId, int], None] | None = None,
        chunk_bytes: int | None = None,
    ) -> ChunkSplitter:
        """The splitter of ``source``'s chunk settings (``chunk_size`` and ``chunk_bytes`` override
        its own)."""
        size = chunk_size or source.chunk_size
        return cls(conn, size, progress=progress, chunk_bytes=chunk_bytes or source.chunk_bytes)

    def split(self, table: CreateTable, chunk_key: str | None = None) -> SplitPlan:
        """Split ``table`` by its first primary-key column (or ``chunk_key``)."""
        key = choose_key_column(table, chunk_key)
        started = time.monotonic()
        min_key, max_key, same = self._min_max(table.table, key)
        rows, row_length = self._statistics(table.table)
        self.chunk_size = self.configured_size or rows_per_chunk(self.chunk_bytes, row_length)
        strategy, reason, ranges = self._ranges(table.table, key, min_key, max_key, same, rows)
        chunks = tuple(Chunk(table.table, i, key.name, r) for i, r in enumerate(ranges))
        log.info(
            "split %s by `%s`: %s, %d chunks (%s) in %.2f s",
            table.table, key.name, strategy, len(chunks), reason, time.monotonic() - started,
        )  # fmt: skip
        return SplitPlan(table.table, key.name, strategy, reason, chunks, min_key, max_key, rows)

    def _ranges(
        self, table: TableId, key: Column, min_key: Any, max_key: Any, same: bool, rows: int
    ) -> tuple[Strategy, str, list[ChunkRange]]:
        if min_key is None:
            return "single", "the table is empty (or its chunk key is NULL in every row)", [ChunkRange.all()]
        if same:
            return "single", "one key value in the whole table", [ChunkRange.all()]
        if key.is_integral:
            factor = distribution_factor(min_key, max_key, rows)
            low, high = self.factor_bounds
            if low <= factor <= high:
                step = max(1, int(self.chunk_size * factor))
                why = (
                    f"integral key, distribution factor {factor:.3g} within [{low:g}, {high:g}]: step {step}"
                )
                ranges, resplit = self._balanced(
                    table, key, min_key, max_key, rows, split_evenly(min_key, max_key, step)
                )
                if resplit:
                    why += f"; {resplit} dense ranges split at the server's borders, sparse ones joined"
                return "even", why, ranges
            why = f"integral key, distribution factor {factor:.3g} outside [{low:g}, {high:g}]"
        else:
            why = f"`{key.column_type}` key: borders queried in the column's own order"
        return "uneven", why, self._split_unevenly(table, key, min_key, max_key)

    def _split_unevenly(
        self, table: TableId, key: Column, min_key: Any, max_key: Any, within: ChunkRange | None = None
    ) -> list[ChunkRange]:
        """``within`` (default: the whole key space) in chunks of ``chunk_size`` rows, each border
        found by the server."""
        within = within or ChunkRange.all()
        ranges: list[ChunkRange] = []
        start: Any = within.start
        bound = max_key if within.end is None else within.end
        end = self._next_end(table, key, min_key if start is None else start, bound)
        while end is not None:
            ranges.append(ChunkRange(start, end))
            if self.progress and len(ranges) % 100 == 0:
                self.progress(table, len(ranges))
            start, end = end, self._next_end(table, key, end, bound)
        ranges.append(ChunkRange(start, within.end))
        return ranges

    def _balanced(
        self, table: TableId, key: Column, min_key: Any, max_key: Any, rows: int, ranges: list[ChunkRange]
    ) -> tuple[list[ChunkRange], int]:
        """An even split made even in rows: the server estimates each range's rows from its index
        (two B-tree dives, no scan); a range holding more than twice ``chunk_size`` is split at
        the server's own borders, neighbours holding few are joined. An even split trusts the keys
        to be spread evenly, and one dense stretch among sparse keys would otherwise make one
        chunk of a large share of the table (Flink CDC's skewed chunks). Returns the ranges and
        how many were split."""
        estimates = self._estimates(table, key, ranges) if len(ranges) > 1 else None
        if estimates is None:
            return ranges, 0
        # The estimates share a bias (InnoDB's dives overcount by up to 2x); their sum is the table.
        scale = rows / max(1, sum(estimates)) if rows else 1.0
        found: list[ChunkRange] = []
        start, held, resplit = ranges[0].start, 0.0, 0
        for chunk, estimate in zip(ranges, estimates, strict=True):
            size = estimate * scale
            if size > 2 * self.chunk_size:
                if chunk.start != start:  # the joined neighbours before it
                    found.append(ChunkRange(start, chunk.start))
                found += self._split_unevenly(table, key, min_key, max_key, chunk)
                start, held, resplit = chunk.end, 0.0, resplit + 1
                continue
            if held and not _joinable(held, size, self.chunk_size):
                found.append(ChunkRange(start, chunk.start))
                start, held = chunk.start, 0.0
            held += size
        if start != ranges[-1].end or not found:
            found.append(ChunkRange(start, ranges[-1].end))
        return found, resplit

    def _estimates(self, table: TableId, key: Column, ranges: list[ChunkRange]) -> list[int] | None:
        """The optimizer's row estimate of each range (EXPLAIN's ``rows``), or None when the key
        has no index to estimate with."""
        found = []
        with self.conn.cursor() as cur:
            for chunk in ranges:
                where, params = range_condition(quote(key.name), chunk)
                cur.execute(f"EXPLAIN SELECT 1 FROM {table.quoted()} WHERE {where}", params)
                names = [d[0].lower() for d in cur.description]
                plan = dict(zip(names, cur.fetchone(), strict=True))
                if plan.get("key") is None or plan.get("rows") is None:
                    return None
                found.append(int(plan["rows"]))
        return found

    def _next_end(self, table: TableId, key: Column, previous: Any, max_key: Any) -> Any:
        """The next chunk border after ``previous``, or None when the last chunk starts there.

        The comparisons (``> previous``, ``>= max``) are evaluated by the server, in the key
        column's type and collation, never in Python.
        """
        k = quote(key.name)
        with self.conn.cursor() as cur:
            cur.execute(
                f"SELECT MAX(k), MAX(k) > %s, MAX(k) >= %s FROM "
                f"(SELECT {k} AS k FROM {table.quoted()} WHERE {k} >= %s ORDER BY {k} LIMIT %s) AS chunk",
                # The border is the (chunk_size + 1)-th key: ends are exclusive, so the chunk
                # then holds chunk_size rows (Flink CDC's LIMIT chunk_size gives one fewer).
                (previous, max_key, previous, self.chunk_size + 1),
            )
            end, after_previous, at_max = cur.fetchone()
            if end is not None and not after_previous:
                # Many rows share `previous`: the next border is the next distinct value.
                cur.execute(
                    f"SELECT MIN({k}), MIN({k}) >= %s FROM {table.quoted()} WHERE {k} > %s",
                    (max_key, previous),
                )
                end, at_max = cur.fetchone()
        if end is None or at_max:
            return None
        return end

    def _min_max(self, table: TableId, key: Column) -> tuple[Any, Any, bool]:
        """MIN and MAX of the key, and whether they are equal in the column's collation."""
        k = quote(key.name)
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT MIN({k}), MAX({k}), MIN({k}) = MAX({k}) FROM {table.quoted()}")
            low, high, same = cur.fetchone()
        return low, high, bool(same)

    def _statistics(self, table: TableId) -> tuple[int, int]:
        """The table's estimated rows and average row length in bytes (0: unknown)."""
        with self.conn.cursor() as cur:
            cur.execute(
                "SELECT TABLE_ROWS, AVG_ROW_LENGTH FROM information_schema.TABLES "
                "WHERE TABLE_SCHEMA = %s AND TABLE_NAME = %s",
                (table.database, table.table),
            )
            row = cur.fetchone()
            estimate = int(row[0] or 0) if row else 0
            length = int(row[1] or 0) if row else 0
            if estimate < COUNTED_BELOW_ROWS:
                # Exact and cheap at this size; the estimate lags right after a bulk load too.
                cur.execute(f"SELECT COUNT(*) FROM {table.quoted()}")
                estimate = int(cur.fetchone()[0])
        return estimate, length


def rows_per_chunk(chunk_bytes: int, row_length: int) -> int:
    """Rows that hold about ``chunk_bytes`` at ``row_length`` bytes a row, within ``CHUNK_ROWS``;
    Flink CDC's 8,096 when the server has no statistics of the table yet."""
    low, high = CHUNK_ROWS
    return UNKNOWN_LENGTH_ROWS if row_length <= 0 else max(low, min(high, chunk_bytes // row_length))
