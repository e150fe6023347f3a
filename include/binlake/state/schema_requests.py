"""The schema changes the stream met, and what became of each (the DDL-apply protocol's record)."""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Engine

from binlake.events import SchemaChange, TableId, change_from_dict, change_to_dict
from binlake.offsets import BinlogOffset
from binlake.state.tables import aware, offset_from_text, offset_text, schema_changes_table, sortable, utc_now

SchemaChangeStatus = Literal["pending", "applied", "ignored", "failed"]


@dataclass(frozen=True)
class SchemaChangeRequest:
    """A schema change the stream met, and what became of it (the DDL-apply protocol's record)."""

    offset: BinlogOffset
    seq: int
    """Order among the changes of one statement (``RENAME TABLE a TO b, c TO d``)."""
    table: TableId
    change: SchemaChange
    behavior: str
    status: SchemaChangeStatus
    message: str | None
    requested_at: dt.datetime
    finished_at: dt.datetime | None


class SchemaChangeRequests:
    """The schema change requests of one pipeline (``StateStore.schema_requests``)."""

    def __init__(self, engine: Engine, pipeline: str) -> None:
        self.engine = engine
        self.pipeline = pipeline

    def request(
        self, offset: BinlogOffset, seq: int, change: SchemaChange, behavior: str
    ) -> SchemaChangeRequest:
        """Record a schema change as pending, or return the record already there (a replay)."""
        existing = self.get(offset, seq)
        if existing is not None:
            return existing
        with self.engine.begin() as conn:
            conn.execute(
                insert(schema_changes_table).values(
                    pipeline=self.pipeline,
                    at=sortable(offset),
                    seq=seq,
                    offset=offset_text(offset),
                    table_name=change.table.name,
                    change=json.dumps(change_to_dict(change)),
                    behavior=behavior,
                    status="pending",
                    requested_at=utc_now(),
                )
            )
        found = self.get(offset, seq)
        assert found is not None
        return found

    def finish(self, offset: BinlogOffset, seq: int, status: SchemaChangeStatus, message: str | None) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(schema_changes_table)
                .where(
                    schema_changes_table.c.pipeline == self.pipeline,
                    schema_changes_table.c.at == sortable(offset),
                    schema_changes_table.c.seq == seq,
                )
                .values(status=status, message=message, finished_at=utc_now())
            )

    def all(self, status: SchemaChangeStatus | None = None) -> list[SchemaChangeRequest]:
        """Schema change requests in binlog order (only those with ``status``, if given)."""
        query = select(schema_changes_table).where(schema_changes_table.c.pipeline == self.pipeline)
        if status is not None:
            query = query.where(schema_changes_table.c.status == status)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(schema_changes_table.c.at, schema_changes_table.c.seq)).all()
        return [_request(r) for r in rows]

    def get(self, offset: BinlogOffset, seq: int) -> SchemaChangeRequest | None:
        """One schema change request (None: there is none at ``offset``/``seq``)."""
        with self.engine.connect() as conn:
            row = conn.execute(
                select(schema_changes_table).where(
                    schema_changes_table.c.pipeline == self.pipeline,
                    schema_changes_table.c.at == sortable(offset),
                    schema_changes_table.c.seq == seq,
                )
            ).first()
        return None if row is None else _request(row)


def _request(row: Any) -> SchemaChangeRequest:
    offset = offset_from_text(row.offset)
    assert offset is not None
    return SchemaChangeRequest(
        offset,
        row.seq,
        TableId.parse(row.table_name),
        change_from_dict(json.loads(row.change)),
        row.behavior,
        row.status,
        row.message,
        aware(row.requested_at),
        None if row.finished_at is None else aware(row.finished_at),
    )
