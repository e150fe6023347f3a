"""The switch: once every planned chunk is read, the stream's start — the smallest high watermark."""

from __future__ import annotations

import logging
from typing import Any

from binlake.events import CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.state.offset_names import ORIGIN, STREAM, SWITCH
from binlake.state.store import StateStore, StoredPlan

log = logging.getLogger(__name__)


def switch_offset(plans: list[StoredPlan]) -> BinlogOffset | None:
    """Where the stream starts once every planned chunk is read: the smallest high watermark
    (None: the snapshot is unfinished)."""
    states = [c for p in plans for c in p.chunks]
    if not states or any(c.status != "finished" or c.high_watermark is None for c in states):
        return None
    return min(c.high_watermark for c in states if c.high_watermark is not None)


def switch(store: StateStore, pipeline: str, schemas: dict[TableId, CreateTable]) -> BinlogOffset | None:
    """Store and return the stream's start offset once every planned chunk is finished.

    The schemas the snapshot read with begin the schema history there: the stream decodes from
    the switch offset on with them, and meets every later DDL in the binlog.
    """
    plans = store.plans(pipeline).load()
    start = switch_offset(plans)
    if start is None:
        return None
    if store.offsets(pipeline).load(SWITCH) != start:
        # A new snapshot: a stream begins anew from it (with a new Spark checkpoint). The switch
        # offset is stored last: a crash before it leaves this to the rerun, which does it all again.
        read = {p.table: schemas[p.table] for p in plans if p.table in schemas}
        store.schema_history(pipeline).restart(start, read, "snapshot")
        store.offsets(pipeline).save(SWITCH, start, forget=(STREAM, ORIGIN))
    log.info("snapshot complete: the stream starts at %s", start)
    return start


def switched(store: StateStore, pipeline: str, plans: list[StoredPlan]) -> bool:
    """Whether the snapshot of these plans is finished and the stream's start stored."""
    start = switch_offset(plans)
    return start is not None and store.offsets(pipeline).load(SWITCH) == start


def high_watermarks(store: StateStore, pipeline: str) -> dict[str, dict[str, Any]]:
    return {
        str(c.chunk.id): c.high_watermark.to_dict()
        for p in store.plans(pipeline).load()
        for c in p.chunks
        if c.high_watermark is not None
    }
