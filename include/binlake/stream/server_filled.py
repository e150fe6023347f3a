"""Columns an ``ADD COLUMN`` filled for the rows a table held, without a row event: the statement's
clock (what ``CURRENT_TIMESTAMP`` gave them: ``schema.defaults.existing_rows_value``), and the gap
where only the server knew the values (AUTO_INCREMENT, generated columns, ``UUID()``): the table is
held from the statement until a backfill read after it is applied (``stream/repairs.py``)."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Sequence
from dataclasses import replace

import pymysql

from binlake.config import PipelineConfig, SourceConfig
from binlake.events import (
    AddColumn,
    AlterColumnType,
    Column,
    DropTable,
    PartitionRowsChanged,
    SchemaChange,
    TableId,
    TruncateTable,
)
from binlake.offsets import BinlogOffset
from binlake.source.binlog.event_rows import Gap
from binlake.source.binlog.scan import Boundary
from binlake.source.server.connection import connect
from binlake.state.store import StateStore


def clocked(source: SourceConfig, changes: list[SchemaChange], boundary: Boundary) -> list[SchemaChange]:
    """``changes`` with the statement's clock where they need it: each added column its time,
    fraction, and wall-clock time in the session's time zone where a default reads it; a TRUNCATE
    or DROP its time (when the rows it removes left the source)."""
    adds = [c for c in changes if isinstance(c, AddColumn)]
    local = local_time(source, boundary) if any(_reads_local_time(c.column) for c in adds) else None
    return [
        replace(c, statement_time=boundary.timestamp, statement_micros=boundary.micros, statement_local=local)
        if isinstance(c, AddColumn)
        else replace(c, statement_time=boundary.timestamp)
        if isinstance(c, TruncateTable | DropTable)
        else c
        for c in changes
    ]


def local_time(source: SourceConfig, boundary: Boundary) -> dt.datetime | None:
    """The statement's time in its session time zone, converted by the server as its ``NOW()`` did
    (the zone the event names: ``SYSTEM``, an offset, or a name from the server's tz tables); None
    where the event names none or the server no longer knows it."""
    if boundary.time_zone is None:
        return None
    with contextlib.closing(connect(source)) as conn, conn.cursor() as cursor:
        try:
            cursor.execute("SET time_zone = %s", (boundary.time_zone,))
        except pymysql.err.DatabaseError:
            return None  # e.g. a named zone whose tz tables were dropped since
        cursor.execute("SELECT FROM_UNIXTIME(%s)", (boundary.timestamp,))
        row = cursor.fetchone()
    found = row[0] if row else None
    return found if isinstance(found, dt.datetime) else None


def meet_server_filled(
    config: PipelineConfig,
    store: StateStore,
    changes: Sequence[SchemaChange],
    at: BinlogOffset,
    strict: bool = True,
    brought: Sequence[tuple[TableId, str]] = (),
) -> None:
    """Hand the statement's gaps (columns only the server could fill, columns whose new type
    changed their values — ``strict``: values that did not fit failed the statement — on tables
    with rows; new tables ``brought`` with rows, and by what) to the stream's repairs: healed, or
    the stream stops here (``stream.on_gap``)."""
    # Here, not at the top: the planning side imports this module and must stay light (pyarrow).
    from binlake.schema.defaults import existing_rows_value
    from binlake.state.backfills import BackfillLedger
    from binlake.state.repair_ledger import RepairLedger
    from binlake.stream.repairs import StreamRepairs

    gaps = [
        _server_gap(change, at)
        for change in changes
        if isinstance(change, AddColumn)
        and (clock := change.clock) is not None
        and existing_rows_value(change.column, clock) is None
        and _holds_rows(config, change.table)
    ]
    gaps += _type_gaps(config, store, changes, at, strict)
    gaps += [_server_side(table, f"{what} brought the rows the table holds", at) for table, what in brought]
    if config.pipeline.schema_change_behavior in ("evolve", "try_evolve"):  # lenient keeps such rows
        gaps += [
            _rows_gap(change, at)
            for change in changes
            if isinstance(change, PartitionRowsChanged) and _holds_rows(config, change.table)
        ]
    if gaps:
        name = config.pipeline.name
        heal = config.stream.on_gap == "backfill"
        StreamRepairs(name, RepairLedger(store, name), BackfillLedger(store), None, heal=heal).meet(gaps)


def _holds_rows(config: PipelineConfig, table: TableId) -> bool:
    """Whether the table's state table holds rows (a changelog's or history's past counts: a gap
    healed for nothing is a backfill, a gap missed a difference)."""
    from binlake.schema.table_rules import table_rules  # light imports: see meet_server_filled
    from binlake.sink.catalog import open_catalog
    from binlake.sink.column_fill import holds_rows

    catalog = open_catalog(config)
    identifier = table_rules(config, table).state_name
    return catalog.table_exists(identifier) and holds_rows(catalog.load_table(identifier))


def _reads_local_time(column: Column) -> bool:
    """Whether the column's default reads the session's wall clock (``NOW()`` of a DATETIME,
    ``CURDATE()``)."""
    default = (column.default or "").lower()
    return column.data_type in ("datetime", "date") and any(w in default for w in ("now", "cur", "local"))


def _server_gap(change: AddColumn, at: BinlogOffset) -> Gap:
    column = change.column
    what = (
        "generated"
        if column.generated
        else "AUTO_INCREMENT"
        if column.auto_increment
        else f"`DEFAULT {column.default}`"
    )
    reason = f"`ADD COLUMN {column.name}` ({what}) gave the rows the table held values the server computed"
    return _server_side(change.table, reason, at, change.statement_time or 0)


def _type_gaps(
    config: PipelineConfig, store: StateStore, changes: Sequence[SchemaChange], at: BinlogOffset, strict: bool
) -> list[Gap]:
    """Columns whose new type made the server convert the values it held (``schema/type_changes.py``)."""
    from binlake.schema.type_changes import changed_values  # light imports: see meet_server_filled

    gaps = []
    for change in changes:
        if not isinstance(change, AlterColumnType):
            continue
        old = _column_before(store, config.pipeline.name, change.table, change.column.name, at)
        how = changed_values(old, change.column, strict) if old is not None else None
        if old is not None and how is not None and _holds_rows(config, change.table):
            what = f"`MODIFY {old.name}` ({old.column_type} → {change.column.column_type}: {how})"
            gaps.append(_server_side(change.table, f"{what} rewrote the rows the table held", at))
    return gaps


def _column_before(
    store: StateStore, pipeline: str, table: TableId, name: str, at: BinlogOffset
) -> Column | None:
    """The column ``name`` of ``table`` as the schema history holds it before ``at``."""
    version = store.schema_history(pipeline).before(table, at)
    schema = version.schema if version is not None else None
    return next((c for c in schema.columns if c.name == name), None) if schema is not None else None


def _rows_gap(change: PartitionRowsChanged, at: BinlogOffset) -> Gap:
    return _server_side(change.table, f"`{change.action}` deleted or changed rows of the table", at)


def _server_side(table: TableId, what: str, at: BinlogOffset, timestamp: int = 0) -> Gap:
    """A gap of ``table`` at ``at``: ``what`` the server did to its rows, which no row event carries
    (nothing to fix on the source: a backfill reads the values there)."""
    return Gap(
        table,
        f"{what}, which no row event carries",
        "none is needed on the source (the values are there, only not in the binlog)",
        at,
        timestamp,
    )
