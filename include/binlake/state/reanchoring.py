"""The state store's side of a stream re-anchored on a new binlog (``stream/failover.py``).

Positions of the old binlog mean nothing in the new one: what the store holds in them either moves
to the new position (the stream's offsets, the schema history) or goes stale (staged backfills);
what cannot move (a snapshot's chunk windows, open repairs) refuses the re-anchoring.
"""

from __future__ import annotations

from binlake.config import PipelineConfig
from binlake.offsets import BinlogOffset
from binlake.state.backfills import BackfillLedger
from binlake.state.offset_names import ANCHOR, ORIGIN, STREAM
from binlake.state.repair_ledger import RepairLedger
from binlake.state.store import StateStore


def snapshot_applies(config: PipelineConfig, store: StateStore) -> bool:
    """Whether the stream begins at the snapshot's switch and its watermarks are still positions
    of the binlog the stream reads (a failover re-anchors the stream past all of them)."""
    return (
        config.source.startup_mode == "initial" and store.offsets(config.pipeline.name).load(ANCHOR) is None
    )


def held_in_old_positions(
    store: StateStore, pipeline: str, old: BinlogOffset, in_snapshot: bool
) -> list[str]:
    """What the store holds past ``old`` that cannot move to a new binlog (``in_snapshot``: the
    stream is still inside its snapshot's window, whose chunk watermarks are old positions)."""
    problems: list[str] = []
    if in_snapshot:
        highs = [c.high_watermark for p in store.plans(pipeline).load() for c in p.chunks if c.high_watermark]
        if highs and max(highs) > old:
            problems.append(f"the stream is still inside its snapshot's window (up to {max(highs)})")
    if RepairLedger(store, pipeline).repairs(status="open"):
        problems.append("tables are held back under repairs in the old binlog's positions")
    return problems


def move_to(store: StateStore, pipeline: str, new: BinlogOffset, why: str) -> None:
    """Move the stream's record to ``new``: the schema history starts again there with every
    table's current schema (rows after it were written with those), backfills staged in old
    positions go stale, and a new Spark checkpoint lineage begins (the old one holds old positions)."""
    history = store.schema_history(pipeline)
    current = list(history.current().values())
    history.delete()
    for version in current:
        history.record(version.table, new, version.schema, f"re-anchored after: {why}")
    ledger = BackfillLedger(store)
    waiting = ledger.units(pipeline, statuses=["pending", "staged"])
    if waiting:
        ledger.finish(pipeline, waiting, "stale", f"read in the old binlog's positions ({why}); run it again")
    offsets = store.offsets(pipeline)
    for name in (ANCHOR, ORIGIN, STREAM):
        offsets.save(name, new)
