"""binlake's metadata tables (SQLAlchemy), created on first use, and the helpers their rows need."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    delete,
    insert,
)
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import DBAPIError
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_incrementing

from binlake.offsets import BinlogOffset

metadata = MetaData()

plans_table = Table(
    "binlake_plans",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("key_column", String(200), nullable=False),
    Column("strategy", String(20), nullable=False),
    Column("reason", Text, nullable=False),
    Column("chunk_count", Integer, nullable=False),
    Column("estimated_rows", BigInteger, nullable=False),
    Column("min_key", Text),
    Column("max_key", Text),
    Column("planned_at", DateTime(timezone=True), nullable=False),
)

chunks_table = Table(
    "binlake_chunks",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("chunk_id", Integer, primary_key=True),
    Column("key_column", String(200), nullable=False),
    Column("start_key", Text),
    Column("end_key", Text),
    Column("status", String(20), nullable=False, default="planned"),
    Column("low_watermark", Text),
    Column("high_watermark", Text),
    Column("row_count", BigInteger),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)


offsets_table = Table(
    "binlake_offsets",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("name", String(200), primary_key=True),
    Column("offset", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# Who holds a sink table: a process (its token), not a role. ``binlake_leases``, the role-keyed
# table of earlier versions, is no longer read: its leases expired long ago or belong to a process
# of an older binlake that must be stopped before upgrading.
leases_table = Table(
    "binlake_table_leases",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("token", String(64), nullable=False),
    Column("holder", Text, nullable=False),  # the process, for people: see ``state/writers.Process``
    Column("acquired_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
)

# One live process per pipeline and command, and the fencing epoch of that command, which only
# grows: the row outlives its holder (a release only ends its lease) so the next epoch is higher.
writers_table = Table(
    "binlake_writers",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("command", String(400), primary_key=True),  # a holder's ``key``: its command, or a part
    Column("token", String(64), nullable=False),
    Column("holder", Text, nullable=False),  # the process, for people: ``state/holders.Holder``
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("process_started", Float, nullable=False),
    Column("since", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    Column("epoch", BigInteger, nullable=False),
)


stream_batches_table = Table(
    "binlake_stream_batches",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("run_id", String(64), primary_key=True),
    Column("batch_id", BigInteger, primary_key=True),
    Column("end_offset", Text, nullable=False),
    Column("changes", Text, nullable=False),
    Column("rows", BigInteger, nullable=False),
    Column("seconds", Float, nullable=False),
    Column("lag_s", Float),
    Column("finished_at", DateTime(timezone=True), nullable=False),
)

schema_history_table = Table(
    "binlake_schema_history",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("at", BigInteger, primary_key=True),
    Column("offset", Text, nullable=False),
    Column("schema", Text),  # null: the table does not exist (dropped, renamed away) from here on
    Column("cause", Text, nullable=False),
    Column("recorded_at", DateTime(timezone=True), nullable=False),
)

schema_changes_table = Table(
    "binlake_schema_changes",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("at", BigInteger, primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("offset", Text, nullable=False),
    Column("table_name", String(400), nullable=False),
    Column("change", Text, nullable=False),
    Column("behavior", String(20), nullable=False),
    Column("status", String(20), nullable=False),
    Column("message", Text),
    Column("requested_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True)),
)

quality_results_table = Table(
    "binlake_quality_results",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("run_name", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("success", Boolean, nullable=False),
    Column("results", Text, nullable=False),
    Column("report", Text),
    Column("checked_at", DateTime(timezone=True), nullable=False),
)

verify_chunks_table = Table(
    "binlake_verify_chunks",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("verify_id", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("chunk", Integer, primary_key=True),
    Column("key_column", String(200), nullable=False),
    Column("chunk_range", Text, nullable=False),  # JSON: {start, end} (state.codec keys)
    Column("status", String(20), nullable=False),  # equal | drifted | unverified | repaired
    Column("source_rows", BigInteger),
    Column("sink_rows", BigInteger),
    Column("at", Text),  # JSON offset the chunk was compared at
    Column("note", Text),
    Column("verified_at", DateTime(timezone=True), nullable=False),
)

backfill_units_table = Table(
    "binlake_backfill_units",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("backfill_id", String(200), primary_key=True),
    Column("unit_id", Integer, primary_key=True),
    Column("table_name", String(400), nullable=False),
    Column("key_column", String(200), nullable=False),
    Column("chunks", Text, nullable=False),  # JSON: [{start, end, low, high, rows}]
    Column("status", String(20), nullable=False),
    Column("files", Text),  # JSON list of staged Parquet file URIs
    Column("rows", BigInteger),
    Column("message", Text),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

repairs_table = Table(
    "binlake_repairs",
    metadata,
    Column("pipeline", String(200), primary_key=True),
    Column("table_name", String(400), primary_key=True),
    Column("at", BigInteger, primary_key=True),
    Column("offset", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("backfill_id", String(200), nullable=False),
    Column("status", String(20), nullable=False),  # open, closed
    Column("opened_at", DateTime(timezone=True), nullable=False),
    Column("closed_at", DateTime(timezone=True)),
)


def replace_row(conn: Connection, table: Table, key: dict[str, Any], values: dict[str, Any]) -> None:
    """Insert the row of ``key`` with ``values``, replacing the one there (portable: no dialect's
    upsert, and both statements in the caller's transaction)."""
    conn.execute(delete(table).where(*(table.c[column] == value for column, value in key.items())))
    conn.execute(insert(table).values(**key, **values))


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def offset_text(offset: BinlogOffset | None) -> str | None:
    return None if offset is None else json.dumps(offset.to_dict())


def offset_from_text(text: str | None) -> BinlogOffset | None:
    return None if text is None else BinlogOffset.from_dict(json.loads(text))


def create_tables(
    engine: Engine, attempts: int = 5, busy: tuple[type[BaseException], ...] = (DBAPIError,)
) -> None:
    """Create binlake's tables if missing. Several processes may do so at once (the stream's driver
    and its source both open the store, Airflow's mapped jobs start together); the loser of that
    race sees "already exists" or a lock (``busy``: the errors it may see) and checks again."""
    for attempt in Retrying(
        retry=retry_if_exception_type(busy),
        stop=stop_after_attempt(attempts),
        wait=wait_incrementing(start=0.1, increment=0.1),
        reraise=True,
    ):
        with attempt:
            metadata.create_all(engine)


def aware(value: dt.datetime) -> dt.datetime:
    # SQLite hands back naive datetimes even for timezone-aware columns; they were stored in UTC.
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)


def sortable(offset: BinlogOffset) -> int:
    """The offset as one integer that sorts like offsets (file sequence number, then position)."""
    return offset.packed
