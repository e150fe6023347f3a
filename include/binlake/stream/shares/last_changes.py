"""Per-table compaction of a micro-batch's changes (Arrow, in the driver).

Tables with a primary key keep the last change per key by binlog position: a delete wins over
earlier changes, an insert or update is an upsert of the row, whatever came before (a key update
arrives as a delete of the old key and an update of the new one). Tables without a key net whole
rows out: each row counts +1 per insert and -1 per delete, so duplicates stay exact whatever the
order.

Both work on whole columns (Arrow's hash grouping), never row by row in Python.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from binlake.stream.records import images


@dataclass(frozen=True)
class KeyedChanges:
    upserts: pa.Table
    """Whole rows (the table's columns)."""
    deletes: pa.Table
    """Key columns."""
    times: pa.Array | None = None
    """The upserts' event times (epoch seconds)."""
    positions: pa.Array | None = None
    """The upserts' ``records.position``."""
    ops: pa.Array | None = None
    """The upserts' event kinds (``insert`` or ``update``)."""
    removed: pa.Table | None = None
    """The deletes' change rows (their before images: whole for soft deletes)."""


@dataclass(frozen=True)
class RowChanges:
    inserts: pa.Table
    removes: pa.Table
    """Whole rows, each to remove once (a row twice: two equal rows go)."""


def last_per_key(changes: pa.Table, keys: Sequence[str]) -> KeyedChanges:
    """The last change per key of ``changes`` (one table's change table, in binlog order)."""
    grouping = images(changes, keys)
    names = [f"k{i}" for i in range(len(keys))]  # the key's own names may clash with "n"
    numbered = grouping.rename_columns(names).append_column(
        "n", pa.array(np.arange(changes.num_rows, dtype=np.int64))
    )
    last = numbered.group_by(names, use_threads=False).aggregate([("n", "max")]).column("n_max")
    final = changes.take(last)
    deleted = pc.equal(final.column("op"), "delete")
    kept = final.filter(pc.invert(deleted))
    deletes = images(final.filter(deleted), keys)
    removed = final.filter(deleted)
    return KeyedChanges(
        images(kept), deletes, kept.column("ts"), kept.column("at"), kept.column("op"), removed
    )


def net_rows(changes: pa.Table) -> RowChanges:
    """Whole-row changes of ``changes`` (one keyless table's) netted into rows to add and remove."""
    rows = images(changes)
    names = [f"c{i}" for i in range(rows.num_columns)]
    sign = pc.if_else(pc.equal(changes.column("op"), "insert"), 1, -1).cast(pa.int64())
    grouped = rows.rename_columns(names).append_column("n", sign).group_by(names, use_threads=False)
    counted = grouped.aggregate([("n", "sum")])
    net = counted.column("n_sum").to_numpy()
    distinct = counted.select(names).rename_columns(rows.column_names)
    return RowChanges(_repeat(distinct, np.maximum(net, 0)), _repeat(distinct, np.maximum(-net, 0)))


def _repeat(rows: pa.Table, times: np.ndarray) -> pa.Table:
    return rows.take(pa.array(np.repeat(np.arange(rows.num_rows, dtype=np.int64), times)))
