"""The state store: what binlake has planned and done, in a SQL database through SQLAlchemy.

SQLite under ``work_dir`` by default, Postgres at scale (``pipeline.state_uri``). Every method is
one transaction, so a crash leaves either the old state or the new one, never half of a plan.

One concept per module, each bound to a pipeline: ``plans``, ``offsets``, ``stream_history``,
``schema_history``, ``schema_requests``, ``leases``, ``writers``, ``quality_results`` (and the ledgers of
backfills and repairs); the tables are in ``tables``. ``StateStore`` owns the connection and hands
out those objects (``store.plans(pipeline).load()``).
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from sqlalchemy import create_engine
from sqlalchemy.engine import Engine
from sqlalchemy.engine.url import make_url

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


class StateStore:
    """binlake's metadata tables in one SQL database (created on first use); a context manager."""

    def __init__(self, uri: str) -> None:
        url = make_url(uri)
        if url.drivername.startswith("sqlite") and url.database:
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
        self.engine: Engine = create_engine(uri, future=True)
        create_tables(self.engine)

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
