"""The binlog source's rows: one fixed schema for the changes of every table.

Executors do the expensive part — decoding the binlog, in parallel — and hand the driver rows of
this schema; the driver filters, compacts and turns images into Arrow per table.

Columns:

- ``table``: ``database.table`` (null on segment rows).
- ``op``: ``upsert`` / ``delete`` for tables with a primary key; ``insert`` / ``delete`` (whole
  rows) for tables without; ``segment`` for the one row each partition ends with, which carries
  the segment's end offset and newest event time even when none of its changes is captured.
- ``key``: the primary key (tables with one), else the chunk key alone — what compaction and the
  snapshot filter need — as a pickled tuple.
- ``image``: the row in column order, pickled; null for deletes of keyed tables (their key is all
  the sink needs: the before image is not carried).
- ``at``: a sortable position: binlog file number << 32 | position of the row's event.
- ``idx``: order of rows within one event (an update of the key is two rows: delete, upsert).
- ``ts``: event time, epoch seconds.
- ``file``: binlog file name, on segment rows (whose ``at`` is the segment's end).

Images are pickled because they hold Decimal, datetime and bytes values that pickle keeps exact
and fast; they never leave the job (its executors write them, its driver reads them).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Sequence
from typing import Any

import pyarrow as pa

from binlake.events import CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.source.binlog_reader import RowImage

SPARK_SCHEMA = "table STRING, op STRING, key BINARY, image BINARY, at BIGINT, idx INT, ts BIGINT, file STRING"
ARROW_SCHEMA = pa.schema(
    [
        ("table", pa.string()),
        ("op", pa.string()),
        ("key", pa.binary()),
        ("image", pa.binary()),
        ("at", pa.int64()),
        ("idx", pa.int32()),
        ("ts", pa.int64()),
        ("file", pa.string()),
    ]
)
SEGMENT = "segment"


def position(offset: BinlogOffset) -> int:
    """``at``: the offset as one sortable integer (positions stay below 2^32: max_binlog_size ≤ 1 GiB)."""
    return offset.sequence << 32 | offset.pos


def key_columns(table: CreateTable, chunk_keys: dict[str, str]) -> tuple[str, ...]:
    """The columns in a row's ``key``: the primary key, or the configured chunk key."""
    if table.primary_key:
        return table.primary_key
    column = chunk_keys.get(table.table.name)
    return (column,) if column else ()


class RecordBuilder:
    """Turns row images of one binlog segment into record batches of ``ARROW_SCHEMA``."""

    def __init__(self, tables: Iterable[CreateTable], chunk_keys: dict[str, str]) -> None:
        self._specs: dict[TableId, tuple[str, bool, list[int]]] = {}
        for table in tables:
            names = table.column_names
            keys = key_columns(table, chunk_keys)
            self._specs[table.table] = (
                table.table.name,
                bool(table.primary_key),
                [names.index(k) for k in keys],
            )
        self._lists: list[list[Any]] = [[] for _ in ARROW_SCHEMA]
        self._last: tuple[BinlogOffset, int] | None = None
        self.rows = 0

    def __len__(self) -> int:
        return len(self._lists[1])

    def add(self, row: RowImage) -> None:
        table, _, before, after, offset, ts, index = row
        name, keyed, key_at = self._specs[table]
        if self._last is None or self._last[0] is not offset:
            self._last = (offset, position(offset))
        at = self._last[1]
        self.rows += 1
        dumps, append = pickle.dumps, self._append
        if keyed:
            if after is not None:
                after_key = tuple([after[i] for i in key_at])
                if before is not None:
                    before_key = tuple([before[i] for i in key_at])
                    if before_key != after_key:  # the key itself changed: delete the old one
                        append(name, "delete", dumps(before_key), None, at, 2 * index, ts)
                append(name, "upsert", dumps(after_key), dumps(after), at, 2 * index + 1, ts)
            elif before is not None:
                key = dumps(tuple([before[i] for i in key_at]))
                append(name, "delete", key, None, at, 2 * index, ts)
            return
        # Without a key a row is its own identity: an update removes its before image, adds its after.
        if before is not None:
            key = dumps(tuple([before[i] for i in key_at]))
            append(name, "delete", key, dumps(before), at, 2 * index, ts)
        if after is not None:
            key = dumps(tuple([after[i] for i in key_at]))
            append(name, "insert", key, dumps(after), at, 2 * index + 1, ts)

    def segment(self, end: BinlogOffset, timestamp: int) -> None:
        """The segment's closing row: its end offset and the time of its newest event."""
        self._append(None, SEGMENT, None, None, position(end), self.rows, timestamp, end.file)

    def batch(self) -> pa.RecordBatch:
        """The rows added since the last call."""
        arrays = [pa.array(values, type=f.type) for values, f in zip(self._lists, ARROW_SCHEMA, strict=True)]
        self._lists = [[] for _ in ARROW_SCHEMA]
        batch = pa.RecordBatch.from_arrays(arrays, schema=ARROW_SCHEMA)
        return batch

    def _append(
        self,
        table: str | None,
        op: str,
        key: bytes | None,
        image: bytes | None,
        at: int,
        idx: int,
        ts: int,
        file: str | None = None,
    ) -> None:
        t, o, k, i, a, x, s, f = self._lists
        t.append(table)
        o.append(op)
        k.append(key)
        i.append(image)
        a.append(at)
        x.append(idx)
        s.append(ts)
        f.append(file)


def images_to_arrow(images: Sequence[bytes], schema: pa.Schema) -> pa.Table:
    """Pickled row images (or keys) → an Arrow table of ``schema`` (column-wise conversion)."""
    rows = [pickle.loads(image) for image in images]
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    arrays = [pa.array(list(col), type=field.type) for col, field in zip(columns, schema, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def key_value(key: bytes) -> Any:
    """The first key column's value (the chunk key) of a pickled key."""
    return pickle.loads(key)[0]
