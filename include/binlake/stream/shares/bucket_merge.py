"""A table's share of a micro-batch merged in key buckets, on the executors (Paimon's and Flink's
Iceberg sink: parallel writers, one committer).

A large batch of a merge-on-read table with a primary key does not come to the driver. Two steps
run in Spark tasks, each on its share:

1. ``split_blocks`` (where the segments were decoded): each block of changes, after the changes the
   table holds already, is cut by a hash of the key into ``buckets`` parts, so every change of one
   key lands in one bucket, whatever segment it came from.
2. ``merge_buckets`` (after Spark's shuffle by table and bucket): a bucket's changes are put in
   binlog order, compacted to the last change per key (``stream.shares.last_changes``), projected onto the
   sink's columns and written as Parquet data files of the table (sorted by key). What goes back
   to the driver are *committables*: the files' ``DataFile`` entries, the batch's keys (the driver
   turns them into position deletes through the key index) and counts.

The driver then commits each table once, with the batch's end offset (exactly once, as before): a
batch that fails after step 2 leaves files no snapshot names, which ``binlake maintain`` removes.

A bucket whose updates lack columns (``binlog_row_image`` NOBLOB/MINIMAL) needs the sink's stored
rows to complete them (``stream.shares.patches``); it reports ``patch`` and the driver merges the table
itself.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile
from pyiceberg.table.metadata import TableMetadata

from binlake.schema.projection import project
from binlake.schema.transforms import Transform
from binlake.sink.layout import sorted_rows
from binlake.sink.pyiceberg_internals import write_data_files
from binlake.stream.records import ABSENT_COLUMNS, CHANGES, images
from binlake.stream.shares.last_changes import last_per_key

#: Rows step 1 hands to Spark's shuffle: a block's changes of one key bucket (Arrow IPC).
SPLIT_SCHEMA = pa.schema([("table", pa.string()), ("bucket", pa.int32()), ("data", pa.binary())])
SPLIT_DDL = "table STRING, bucket INT, data BINARY"

_IPC = pa.ipc.IpcWriteOptions(compression="lz4")


@dataclass(frozen=True)
class BucketPlan:
    """What the tasks need to merge one source table's share (pickled into them)."""

    name: str
    source: pa.Schema
    """The source table's columns (the change table's row struct)."""
    keys: tuple[str, ...]
    sink: pa.Schema
    """The sink table's columns, which the rows are projected onto (by name)."""
    sink_keys: pa.Schema
    metadata: TableMetadata
    """The sink table as the batch found it (schema, partition spec, location, file size)."""
    io: FileIO
    after: int
    """``records.position`` the table holds changes up to: earlier ones are dropped."""
    transform: Transform | None = None
    """The table's projection and filter (``schema.transforms``)."""
    binlog: str = "binlog"
    """The binlog files' base name (``__binlog_position__``)."""


@dataclass
class BucketResult:
    """One table's committables, gathered in the driver."""

    files: list[DataFile] = field(default_factory=list)
    keys: list[pa.Table] = field(default_factory=list)
    """Every key of the batch (upserted or deleted), in the sink's key columns."""
    upserts: int = 0
    deletes: int = 0
    patch: bool = False
    """Some update lacks columns: the driver merges the table instead."""

    def all_keys(self, schema: pa.Schema) -> pa.Table:
        return pa.concat_tables(self.keys).cast(schema) if self.keys else schema.empty_table()


def split_blocks(
    batches: Iterable[pa.RecordBatch], plans: dict[str, BucketPlan], buckets: int
) -> Iterator[pa.RecordBatch]:
    """Step 1: envelope rows (``stream.records``) → their planned tables' changes by key bucket."""
    for batch in batches:
        tables, kinds, data = (batch.column(n).to_pylist() for n in ("table", "kind", "data"))
        out: list[tuple[str, int, bytes]] = []
        for table, kind, blob in zip(tables, kinds, data, strict=True):
            plan = plans.get(table) if kind == CHANGES else None
            if plan is None or blob is None:
                continue
            changes = pa.ipc.open_stream(blob).read_all()
            changes = changes.filter(pc.greater(changes.column("at"), plan.after))
            if changes.num_rows == 0:
                continue
            bucket = key_buckets(changes, plan.keys, buckets)
            for b in np.unique(bucket):
                part = changes.filter(pa.array(bucket == b))
                out.append((table, int(b), _ipc(part)))
        if out:
            columns = list(zip(*out, strict=True))
            yield pa.RecordBatch.from_arrays(
                [pa.array(c, f.type) for c, f in zip(columns, SPLIT_SCHEMA, strict=True)], schema=SPLIT_SCHEMA
            )


def key_buckets(changes: pa.Table, keys: tuple[str, ...], buckets: int) -> np.ndarray[Any, Any]:
    """Each change's bucket: a hash of its key (pandas' SipHash with a fixed key: the same in every
    process, unlike Python's ``hash``) modulo ``buckets``."""
    frame = images(changes, keys).to_pandas(types_mapper=None)
    hashed: np.ndarray[Any, Any] = pd.util.hash_pandas_object(frame, index=False).to_numpy()
    return (hashed % np.uint64(buckets)).astype(np.int32)


def merge_parts(
    parts: Iterable[tuple[str, int, Any]], plans: dict[str, BucketPlan]
) -> Iterator[tuple[str, BucketResult]]:
    """Step 2: one task's buckets (rows of ``SPLIT_SCHEMA``: table, bucket, IPC stream) → each
    table-bucket's committables (see the module docstring)."""
    groups: dict[tuple[str, int], list[pa.Table]] = {}
    for table, bucket, blob in parts:
        groups.setdefault((table, bucket), []).append(pa.ipc.open_stream(pa.py_buffer(blob)).read_all())
    for (table, _), tables in sorted(groups.items()):
        # Each part is in binlog order and parts do not overlap (a block holds whole events of
        # one segment; segments do not overlap): order the parts, not the rows (``table_changes``).
        tables.sort(key=lambda t: t.column("at")[0].as_py())
        yield table, _merge(plans[table], pa.concat_tables(tables).combine_chunks())


def _merge(plan: BucketPlan, changes: pa.Table) -> BucketResult:
    if changes.column(ABSENT_COLUMNS).null_count != changes.num_rows:
        return BucketResult(patch=True)
    last = last_per_key(changes, plan.keys)
    upserts, deletes = last.upserts.cast(plan.source), last.deletes.cast(_key_schema(plan))
    if plan.transform is not None:  # rows the filter drops are deleted (``Transform.upserts``)
        upserts, dropped = plan.transform.upserts(upserts, last.times, last.positions, plan.binlog, last.ops)
        deletes = pa.concat_tables([deletes, dropped.cast(deletes.schema)])
    rows = project(upserts, plan.sink)
    keys = project(deletes, plan.sink_keys)
    upserted = rows.select(plan.sink_keys.names)
    files: list[DataFile] = []
    if rows.num_rows:
        rows = sorted_rows(rows, plan.metadata, plan.sink_keys.names)
        files = list(write_data_files(plan.metadata, rows, plan.io, uuid.uuid4(), itertools.count(0)))
    return BucketResult(files, [upserted, keys.cast(upserted.schema)], rows.num_rows, keys.num_rows)


def _key_schema(plan: BucketPlan) -> pa.Schema:
    return pa.schema([plan.source.field(k) for k in plan.keys])


def gather(results: Iterable[tuple[str, BucketResult]]) -> dict[str, BucketResult]:
    """The committables of every task, per source table (in the driver)."""
    tables: dict[str, BucketResult] = {}
    for table, result in results:
        mine = tables.setdefault(table, BucketResult())
        mine.files += result.files
        mine.keys += result.keys
        mine.upserts += result.upserts
        mine.deletes += result.deletes
        mine.patch = mine.patch or result.patch
    return tables


def split_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[tuple[str, int, bytes]]:
    """``split_blocks``' rows as tuples."""
    for batch in batches:
        yield from zip(*(batch.column(n).to_pylist() for n in SPLIT_SCHEMA.names), strict=True)


def merge_locally(
    envelope: pa.Table, plans: dict[str, BucketPlan], buckets: int
) -> list[tuple[str, BucketResult]]:
    """Both steps in this process, for batches given as Arrow (tests, and Spark-less callers)."""
    return list(merge_parts(split_rows(split_blocks(envelope.to_batches(), plans, buckets)), plans))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue())
