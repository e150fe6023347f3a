"""Matching rows in Arrow: the keys of a batch, rows in a key range, whole rows by identity
(tables without a primary key), positions of keys in a file."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from binlake.schema.routes import SOURCE_TABLE_COLUMN


@dataclass(frozen=True)
class ClearRange:
    """Rows to remove in a batch commit whatever their key: ``start <= column < end`` (None:
    unbounded; an unbounded start also takes NULLs), of one source table when the sink is routed.
    A backfill replaces a key range this way, so rows the source no longer has go too."""

    column: str
    start: Any = None
    end: Any = None
    source_table: str | None = None


def row_counts(rows: pa.Table, schema: pa.Schema) -> Counter[tuple[Any, ...]]:
    """How many times each whole row (as ``schema``) is in ``rows``: what to remove by identity."""
    return Counter(tuple(r.values()) for r in rows.cast(schema).to_pylist())


def take_rows(
    data: pa.Table, wanted: Counter[tuple[Any, ...]], gone: Sequence[bool] | None = None
) -> list[bool]:
    """Which rows of ``data`` stay when one row equal to each in ``wanted`` goes (``wanted`` is used
    up as rows match, so duplicates stay exact across files); rows marked ``gone`` go anyway."""
    keep = []
    for i, row in enumerate(data.to_pylist()):
        identity = tuple(row.values())
        if gone is not None and gone[i]:
            keep.append(False)
        elif wanted.get(identity, 0) > 0:
            wanted[identity] -= 1
            keep.append(False)
        else:
            keep.append(True)
    return keep


def without(rows: pa.Table, removes: pa.Table) -> pa.Table:
    """``rows`` less one row equal to each of ``removes`` (whole-row identity)."""
    if removes.num_rows == 0:
        return rows
    return rows.filter(pa.array(take_rows(rows, row_counts(removes, rows.schema)), pa.bool_()))


def clear_mask(data: pa.Table, clear: Sequence[ClearRange]) -> pa.Array:
    """Which rows of ``data`` lie in one of the ``clear`` ranges."""
    mask = pa.array([False] * data.num_rows, pa.bool_())
    for c in clear:
        values = data.column(c.column)
        inside = pa.array([True] * data.num_rows, pa.bool_())
        if c.start is not None:
            inside = pc.and_(inside, pc.greater_equal(values, pa.scalar(c.start, values.type)))
        if c.end is not None:
            inside = pc.and_(inside, pc.less(values, pa.scalar(c.end, values.type)))
        inside = pc.fill_null(inside, c.start is None)  # NULL keys belong to the first chunk
        if c.source_table is not None:
            inside = pc.and_(inside, pc.equal(data.column(SOURCE_TABLE_COLUMN), c.source_table))
        mask = pc.or_(mask, inside)
    return mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask


def batch_keys(upserts: pa.Table, deletes: pa.Table | None, key_columns: list[str]) -> pa.Table:
    keys = upserts.select(key_columns)
    if deletes is not None and deletes.num_rows:
        keys = pa.concat_tables([keys, deletes.select(key_columns).cast(keys.schema)])
    return keys


def key_positions(stored: pa.Table, keys: pa.Table, key_columns: list[str]) -> list[int]:
    """Row positions in ``stored`` whose key is among ``keys``."""
    if len(key_columns) == 1:
        column = key_columns[0]
        mask = pc.is_in(stored.column(column), value_set=keys.column(column).combine_chunks())
        return [int(i) for i in pc.indices_nonzero(mask).to_pylist()]
    numbered = stored.append_column("__binlake_pos", pa.array(range(stored.num_rows), pa.int64()))
    # A join needs one type per key column: files and batches may spell strings either way.
    wanted = keys.select(key_columns).cast(stored.select(key_columns).schema)
    matched = numbered.join(wanted.group_by(key_columns).aggregate([]), keys=key_columns, join_type="inner")
    return sorted(int(i) for i in matched.column("__binlake_pos").to_pylist())


def in_range(rows: pa.Table, column: str, low: Any, high: Any) -> pa.ChunkedArray:
    """Mask of ``rows`` whose ``column`` lies in [low, high] (none when the bounds are unknown).

    String bounds may be truncated prefixes (Iceberg's metrics), still a valid enclosing range.
    """
    if low is None or high is None or rows.num_rows == 0:
        return pa.chunked_array([pa.array([False] * rows.num_rows, pa.bool_())])
    values = rows.column(column)
    bound_type = values.type
    return pc.and_(
        pc.greater_equal(values, pa.scalar(low, bound_type)),
        pc.less_equal(values, pa.scalar(high, bound_type)),
    )


def same_key_as_next(rows: pa.Table, keys: Sequence[str]) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Whether each row's key (every column of ``keys``) is the next row's; rows sorted by key
    hold each key's rows together, so this marks all but each key's last."""
    n = rows.num_rows
    same = np.zeros(n, dtype=bool)
    if n < 2:
        return same
    same[:-1] = True
    for name in keys:
        values = rows.column(name)
        equal = pc.fill_null(pc.equal(values.slice(0, n - 1), values.slice(1)), False)
        same[:-1] &= equal.to_numpy(zero_copy_only=False)
    return same
