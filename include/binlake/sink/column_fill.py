"""A column added with the value the source gave the rows it already held.

``ALTER TABLE t ADD COLUMN c … DEFAULT 'std'`` fills every existing row of ``t`` on the server,
and no row event says so. Iceberg adds a column as NULL in every existing file. binlake adds the
column and rewrites the table's files with the value in one commit — the schema change and the
rows that go with it are one snapshot, so no reader (and no replay after a crash) ever sees the
column without its values.

Why a rewrite and not Iceberg v3's ``initial-default``, which fills existing rows in metadata
only: the tables must read the same through every reader, and a reader that does not know v3
defaults (DuckDB's iceberg extension, Spark with Iceberg < 1.9) would silently read NULL — the
difference binlake exists to prevent. The rewrite costs what the server's own copying ALTER
costs: one pass over the table, file by file (memory: one data file at a time), once.
"""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import Table, Transaction
from pyiceberg.table.snapshots import Operation

from binlake.events import AddColumn, CreateTable
from binlake.schema.defaults import existing_rows_value
from binlake.schema.routes import SOURCE_TABLE_COLUMN, source_mask
from binlake.schema.type_mapping import RowConverter
from binlake.sink.pyiceberg_internals import DeltaOverwrite, write_data_files

#: Snapshot property naming the operation (``binlake maintain`` and people reading history).
OPERATION = "binlake.operation"
#: Snapshot property naming the schema change (``offset#seq``) a commit made: a replay finds it.
SCHEMA_CHANGE_KEY = "binlake.schema-change"


def fill_pending(table: Table, column: str, change_id: str | None) -> bool:
    """Whether the fill of an ``ADD COLUMN`` (``change_id``) is still to be made on ``table``: the
    column is missing (it is added and filled in one commit), or — on a table routed sources share,
    where another source's ``ADD COLUMN`` added it — no commit records this source's fill."""
    names = table.schema().column_names
    if column not in names:
        return True
    if SOURCE_TABLE_COLUMN not in names or change_id is None:
        return False
    return not made_change(table, change_id)


def made_change(table: Table, change_id: str) -> bool:
    """Whether a commit of ``table`` records the schema change ``change_id`` (``SCHEMA_CHANGE_KEY``)."""
    return any(
        s.summary is not None and s.summary.additional_properties.get(SCHEMA_CHANGE_KEY) == change_id
        for s in table.metadata.snapshots
    )


def holds_rows(table: Table) -> bool:
    """Whether the table holds a live row. Read (one row of one column), not taken from the snapshot
    summary: its count of position deletes includes positions deleted twice (a backfill's deletes
    of rows a batch had deleted), so records less deletes can fall to zero or below with rows left."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return False
    summary = snapshot.summary.additional_properties
    if int(summary.get("total-records", 0)) == 0:
        return False
    if not any(int(summary.get(k, 0)) for k in ("total-position-deletes", "total-equality-deletes")):
        return True
    first = table.schema().fields[0].name
    found: int = table.scan(selected_fields=(first,), limit=1).to_arrow().num_rows
    return found > 0


def fill_column(
    tx: Transaction, table: Table, column: str, value: pa.Scalar, source: str | None, change_id: str | None
) -> int:
    """Rewrite every data file of ``table`` (as it was before ``tx``) with ``column`` set to
    ``value``, inside ``tx``, whose schema already has the column; returns the rows filled.

    ``source``: on a sink table routed sources share, only that source table's rows get the value
    (the others' tables have no such column, or add it with a value of their own). Every delete
    file goes: the rewritten files hold only live rows. The commit records ``change_id``.
    """
    tasks = list(table.scan().plan_files()) if table.current_snapshot() is not None else []
    if not tasks:
        return 0
    metadata = tx.table_metadata
    schema = metadata.schema()
    retired = {d.file_path for task in tasks for d in task.delete_files}
    write_uuid, counter = uuid.uuid4(), itertools.count(0)
    filled = 0
    with DeltaOverwrite(
        operation=Operation.OVERWRITE,
        transaction=tx,
        io=table.io,
        commit_uuid=write_uuid,
        snapshot_properties={
            OPERATION: f"fill {column}",
            **({SCHEMA_CHANGE_KEY: change_id} if change_id is not None else {}),
        },
        retired_delete_files=retired,
    ) as snap:
        for task in tasks:
            data = ArrowScan(metadata, table.io, schema, AlwaysTrue()).to_table(tasks=[task])
            data, rows = _filled(data, column, value, source)
            filled += rows
            snap.delete_data_file(task.file)
            if data.num_rows:
                for data_file in write_data_files(metadata, data, table.io, write_uuid, counter):
                    snap.append_data_file(data_file)
    return filled


def _filled(data: pa.Table, column: str, value: pa.Scalar, source: str | None) -> tuple[pa.Table, int]:
    index = data.schema.get_field_index(column)
    field = data.schema.field(index)
    values: Any = pa.repeat(value.cast(field.type), data.num_rows)
    rows = data.num_rows
    mine = source_mask(data, source)
    if mine is not None:
        values = pc.if_else(mine, values, data.column(index))
        rows = int(pc.sum(mine).as_py() or 0)
    return data.set_column(index, field, values), rows


def existing_rows_scalar(change: AddColumn) -> pa.Scalar | None:
    """The value the rows a table held got from the source's ``ADD COLUMN`` (None: NULL, or a
    column binlake adds itself, or one only the server knew — which the stream handles before)."""
    clock = change.clock
    if clock is None:
        return None
    found = existing_rows_value(change.column, clock)
    if found is None or found.value is None:
        return None
    converter = RowConverter(CreateTable(change.table, (change.column,)))
    batch = converter.batch([[converter.binlog_row({change.column.name: found.value})[0]]])
    scalar: pa.Scalar = batch.column(0)[0]
    return scalar
