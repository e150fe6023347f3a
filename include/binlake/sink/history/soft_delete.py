"""Soft deletes: a row the source deletes stays in the upsert table, marked.

A table whose ``sink.modes`` rule sets ``soft_delete`` (``config/modes.py``) has three more columns:

- ``__deleted__``: true for a row the source deleted (its values: the row as it was deleted),
  false for a live row (a re-insert of the key makes it live again);
- ``__deleted_at__``: when (the delete's binlog event time; a backfill's: when it was applied);
- ``__deleted_position__``: the delete's binlog position (file number × 2³² + offset).

The stream turns a batch's deletes into upserts of their whole before images (read whole for these
tables, ``stream.shares.patches`` completes MINIMAL ones); a backfill marks the rows of its ranges
the source no longer has; a TRUNCATE marks every live row (``truncate_marking``). The readers that
compare the sink with the source — ``verify``, the quality checks, the tests' comparison — read the
live rows (``live``). A row a transform's filter lets out leaves the table as ever: it was not
deleted on the source.
"""

from __future__ import annotations

import itertools
import uuid

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import Table

from binlake.offsets import BinlogOffset
from binlake.schema.iceberg_types import identifier_columns
from binlake.schema.routes import source_mask
from binlake.sink.layout import sorted_rows
from binlake.sink.metadata_applier import TRUNCATE_ID
from binlake.sink.pyiceberg_internals import transaction, write_data_files

DELETED = "__deleted__"
DELETED_AT = "__deleted_at__"
DELETED_POSITION = "__deleted_position__"
COLUMNS = pa.schema(
    [(DELETED, pa.bool_()), (DELETED_AT, pa.timestamp("us", "UTC")), (DELETED_POSITION, pa.int64())]
)


def ensure_columns(table: Table) -> None:
    """Give ``table`` the soft-delete columns it lacks (rows already there read as live)."""
    have = set(table.schema().column_names)
    if all(name in have for name in COLUMNS.names):
        return
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    ids = pa.schema([f.with_metadata({b"PARQUET:field_id": str(i + 1)}) for i, f in enumerate(COLUMNS)])
    with table.update_schema() as update:
        update.union_by_name(pyarrow_to_schema(ids))


def live_mask(rows: pa.Table) -> pa.Array | pa.ChunkedArray | None:
    """Which rows are live (``__deleted__`` not true); None when ``rows`` have no such column."""
    if DELETED not in rows.column_names:
        return None
    return pc.invert(pc.fill_null(rows.column(DELETED), False))


def live(rows: pa.Table) -> pa.Table:
    """The rows the source holds: those not marked deleted."""
    mask = live_mask(rows)
    return rows if mask is None else rows.filter(mask)


def marked_live(rows: pa.Table) -> pa.Table:
    """``rows`` (sink columns) marked live."""
    n = rows.num_rows
    return _marked(rows, pa.array([False] * n), pa.nulls(n, pa.int64()), pa.nulls(n, pa.int64()))


def marked_deleted(rows: pa.Table, times: pa.Array, positions: pa.Array) -> pa.Table:
    """``rows`` (sink columns) marked deleted at ``times`` (epoch seconds) and ``positions``."""
    return _marked(rows, pa.array([True] * rows.num_rows), pc.multiply(times, 1_000_000), positions)


def _marked(rows: pa.Table, deleted: pa.Array, micros: pa.Array, positions: pa.Array) -> pa.Table:
    rows = rows.drop_columns([n for n in COLUMNS.names if n in rows.column_names])
    values = (deleted, pc.cast(micros, pa.int64()).cast(COLUMNS.field(DELETED_AT).type), positions)
    for field, array in zip(COLUMNS, values, strict=True):
        column = array if isinstance(array, pa.ChunkedArray) else pa.chunked_array([array], array.type)
        rows = rows.append_column(field, column.cast(field.type))
    return rows


def truncate_marking(
    table: Table, event_time: int, at: BinlogOffset, change_id: str, source: str | None = None
) -> int:
    """A TRUNCATE of the source table: every live row of ``table`` (``source``'s alone, on a table
    routed sources share) marked deleted at ``event_time`` and ``at`` (rows deleted earlier keep
    their marks), file by file in one commit that records ``change_id`` as a truncate does (a
    replay marks nothing twice); returns the rows marked."""
    if table.properties.get(TRUNCATE_ID) == change_id:
        return 0
    ensure_columns(table)
    marked = 0
    keys = identifier_columns(table.schema())
    with transaction(table) as tx:
        metadata = tx.table_metadata
        write_uuid, counter = uuid.uuid4(), itertools.count(0)
        with tx.update_snapshot().overwrite(write_uuid) as overwrite:
            for task in table.scan().plan_files():
                rows = ArrowScan(metadata, table.io, metadata.schema(), AlwaysTrue()).to_table(tasks=[task])
                rows, newly = _all_deleted(rows, event_time, at, source)
                marked += newly
                overwrite.delete_data_file(task.file)
                if not rows.num_rows:  # every row of the file deleted already (merge-on-read)
                    continue
                rows = sorted_rows(rows, metadata, keys)
                for data_file in write_data_files(metadata, rows, table.io, write_uuid, counter):
                    overwrite.append_data_file(data_file)
        tx.set_properties({TRUNCATE_ID: change_id})
    return marked


def _all_deleted(
    rows: pa.Table, event_time: int, at: BinlogOffset, source: str | None
) -> tuple[pa.Table, int]:
    """``rows`` with the live ones (of ``source``, if given and routed sources share the table)
    marked deleted at ``event_time`` and ``at``; how many were live."""
    alive = live_mask(rows)
    if alive is None:
        raise ValueError("the rows have no soft-delete columns")
    mine = source_mask(rows, source)
    if mine is not None:
        alive = pc.and_(alive, mine)
    gone = rows.filter(alive)
    n = gone.num_rows
    gone = marked_deleted(gone, pa.array([event_time] * n, pa.int64()), pa.array([at.packed] * n, pa.int64()))
    return pa.concat_tables(
        [rows.filter(pc.invert(alive)), gone.select(rows.column_names).cast(rows.schema)]
    ), n
