"""The state store: what binlake has planned and done, in a SQL database through SQLAlchemy.

SQLite under ``work_dir`` by default, Postgres at scale (``pipeline.state_uri``). Every method is
one transaction, so a crash leaves either the old state or the new one, never half of a plan.

One concept per module, each bound to a pipeline: ``plans``, ``offsets``, ``stream_history``,
``schema_history``, ``schema_requests``, ``leases``, ``writers``, ``quality_results`` (and the ledgers of
backfills and repairs); the tables are in ``tables``. ``StateStore`` owns the connection and hands
out those objects (``store.plans(pipeline).load()``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, ExceptionContext
from sqlalchemy.engine.url import make_url
from sqlalchemy.exc import DBAPIError

from binlake.errors import BinlakeError
from binlake.state.leases import Lease, Leases, TableBusyError
from binlake.state.named_offsets import Offsets
from binlake.state.plans import ChunkState, ChunkStatus, Plans, StoredPlan
from binlake.state.quality_results import QualityResult, QualityResults
from binlake.state.schema_history import SchemaHistory, SchemaVersion
from binlake.state.schema_requests import SchemaChangeRequest, SchemaChangeRequests, SchemaChangeStatus
from binlake.state.stream_history import STREAM_HISTORY, StreamBatch, StreamHistory
from binlake.state.tables import backfill_units_table, create_tables, repairs_table
from binlake.state.verifications import Verifications
from binlake.state.writers import Writers

__all__ = [
    "STREAM_HISTORY",
    "ChunkState",
    "ChunkStatus",
    "Lease",
    "QualityResult",
    "SchemaChangeRequest",
    "SchemaChangeStatus",
    "SchemaVersion",
    "StateStore",
    "StoredPlan",
    "StreamBatch",
    "TableBusyError",
    "backfill_units_table",
    "repairs_table",
]


#: How long a write to a SQLite state store waits for the file's lock before binlake says so.
SQLITE_BUSY_S = 10.0


class StateStoreLockedError(BinlakeError):
    """Another process held a SQLite state store's lock for longer than ``SQLITE_BUSY_S``."""


class StateStore:
    """binlake's metadata tables in one SQL database (created on first use); a context manager."""

    def __init__(self, uri: str) -> None:
        url = make_url(uri)
        sqlite = url.drivername.startswith("sqlite")
        if sqlite and url.database:
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        options = {"connect_args": {"timeout": SQLITE_BUSY_S}} if sqlite else {}
        self.engine: Engine = create_engine(uri, future=True, **options)
        if sqlite:
            event.listen(self.engine, "handle_error", _locked_in(url.database or "memory"))
        create_tables(self.engine, busy=(DBAPIError, StateStoreLockedError))

    def close(self) -> None:
        self.engine.dispose()

    def __enter__(self) -> StateStore:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()

    # -- one concept of one pipeline ---------------------------------------------------------------

    def plans(self, pipeline: str) -> Plans:
        return Plans(self.engine, pipeline)

    def offsets(self, pipeline: str) -> Offsets:
        return Offsets(self.engine, pipeline)

    def stream_history(self, pipeline: str) -> StreamHistory:
        return StreamHistory(self.engine, pipeline)

    def schema_history(self, pipeline: str) -> SchemaHistory:
        return SchemaHistory(self.engine, pipeline)

    def schema_requests(self, pipeline: str) -> SchemaChangeRequests:
        return SchemaChangeRequests(self.engine, pipeline)

    def leases(self, pipeline: str) -> Leases:
        return Leases(self.engine, pipeline)

    def writers(self, pipeline: str) -> Writers:
        return Writers(self.engine, pipeline)

    def quality(self, pipeline: str) -> QualityResults:
        return QualityResults(self.engine, pipeline)

    def verifications(self, pipeline: str) -> Verifications:
        return Verifications(self.engine, pipeline)


def _locked_in(database: str) -> Callable[[ExceptionContext], None]:
    """SQLite's "database is locked" in binlake's words: which file, why, and what to do."""

    def refuse(context: ExceptionContext) -> None:
        if "database is locked" not in str(context.original_exception):
            return
        raise StateStoreLockedError(
            f"Could not write the state store `{database}`: another process holds its lock (binlake "
            f"waited up to {SQLITE_BUSY_S:g} s). SQLite lets one process write at a time, and a process "
            "stopped or hung inside a write keeps every other one out until it ends. Fix: end that process "
            "(`fuser` names it), or give pipelines whose jobs run side by side a PostgreSQL state "
            "store (`pipeline.state_uri: postgresql://…`)."
        ) from None

    return refuse
