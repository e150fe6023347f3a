"""Repairs: tables the stream holds back from a change it could not replicate until a backfill.

A change binlake cannot replicate exactly (``source.event_rows.Gap``: rows a session logged as a
statement, an image without values only the server knew) leaves the sink table unable to follow
its source from that position. The stream stops there and says so — unless a backfill of the whole
table, read after that position, is staged: then it opens a *repair*. From the gap on, it applies
none of the table's changes (the table stays as it was just before them: behind, never wrong);
when it applies the backfill's units — the table's rows as the source had them after the gap,
rolled forward — the repair closes and the table follows its source again.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import insert, select, update

from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.state.store import StateStore
from binlake.state.tables import repairs_table

RepairStatus = Literal["open", "closed"]


@dataclass(frozen=True)
class Repair:
    """A table held back from ``offset`` until backfill ``backfill_id`` is applied."""

    table: TableId
    offset: BinlogOffset
    reason: str
    backfill_id: str
    status: RepairStatus
    opened_at: dt.datetime
    closed_at: dt.datetime | None = None


class RepairLedger:
    """The ``binlake_repairs`` table of a state store, for one pipeline."""

    def __init__(self, store: StateStore, pipeline: str) -> None:
        self.engine = store.engine
        self.pipeline = pipeline

    def open(self, table: TableId, offset: BinlogOffset, reason: str, backfill_id: str) -> Repair:
        """Record a repair (again: a replayed batch opens the same one, which stays as it is)."""
        found = [r for r in self.repairs(table) if r.offset == offset]
        if found:
            return found[0]
        now = dt.datetime.now(dt.UTC)
        with self.engine.begin() as conn:
            conn.execute(
                insert(repairs_table).values(
                    pipeline=self.pipeline,
                    table_name=table.name,
                    at=_sortable(offset),
                    offset=json.dumps(offset.to_dict()),
                    reason=reason,
                    backfill_id=backfill_id,
                    status="open",
                    opened_at=now,
                )
            )
        return Repair(table, offset, reason, backfill_id, "open", now)

    def close(self, table: TableId, backfill_ids: Sequence[str]) -> list[Repair]:
        """Close the table's open repairs that these backfills complete."""
        closing = [r for r in self.repairs(table, "open") if r.backfill_id in backfill_ids]
        if closing:
            now = dt.datetime.now(dt.UTC)
            t = repairs_table
            with self.engine.begin() as conn:
                for repair in closing:
                    conn.execute(
                        update(t)
                        .where(
                            t.c.pipeline == self.pipeline,
                            t.c.table_name == repair.table.name,
                            t.c.at == _sortable(repair.offset),
                        )
                        .values(status="closed", closed_at=now)
                    )
        return closing

    def repairs(self, table: TableId | None = None, status: RepairStatus | None = None) -> list[Repair]:
        """The pipeline's repairs (of one table, in one status), oldest first."""
        t = repairs_table
        query = select(t).where(t.c.pipeline == self.pipeline)
        if table is not None:
            query = query.where(t.c.table_name == table.name)
        if status is not None:
            query = query.where(t.c.status == status)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(t.c.at)).all()
        return [
            Repair(
                TableId.parse(r.table_name),
                BinlogOffset.from_dict(json.loads(r.offset)),
                r.reason,
                r.backfill_id,
                r.status,
                _aware(r.opened_at),
                None if r.closed_at is None else _aware(r.closed_at),
            )
            for r in rows
        ]


def _sortable(offset: BinlogOffset) -> int:
    return offset.packed


def _aware(value: dt.datetime) -> dt.datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=dt.UTC)
