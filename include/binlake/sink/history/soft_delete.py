"""Soft deletes: a row the source deletes stays in the upsert table, marked.

A table whose ``sink.modes`` rule sets ``soft_delete`` (``config_modes.py``) has three more columns:

- ``__deleted__``: true for a row the source deleted (its values: the row as it was deleted),
  false for a live row (a re-insert of the key makes it live again);
- ``__deleted_at__``: when (the delete's binlog event time; a backfill's: when it was applied);
- ``__deleted_position__``: the delete's binlog position (file number × 2³² + offset).

The stream turns a batch's deletes into upserts of their whole before images (read whole for these
tables, ``stream.shares.patches`` completes MINIMAL ones); a backfill marks the rows of its ranges the
source no longer has. The readers that compare the sink with the source — ``verify``, the quality
checks, the tests' comparison — read the live rows (``live``). A row a transform's filter lets out
leaves the table as ever: it was not deleted on the source.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from binlake.config import PipelineConfig
from binlake.config_base import first_match
from binlake.events import TableId

DELETED = "__deleted__"
DELETED_AT = "__deleted_at__"
DELETED_POSITION = "__deleted_position__"
COLUMNS = pa.schema(
    [(DELETED, pa.bool_()), (DELETED_AT, pa.timestamp("us", "UTC")), (DELETED_POSITION, pa.int64())]
)


def soft_deletes(config: PipelineConfig, table: TableId) -> bool:
    """Whether ``table``'s sink keeps the rows the source deletes."""
    rule = first_match(config.sink.modes, table.name)
    return rule is not None and rule.soft_delete


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
