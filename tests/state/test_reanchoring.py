"""The state store's side of a stream re-anchored on a new binlog: what refuses it, and what moves."""

from __future__ import annotations

from binlake.events import Column, CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.source.chunks.splitter import ChunkRange
from binlake.state.backfills import BackfillLedger
from binlake.state.offset_names import ANCHOR, ORIGIN, STREAM
from binlake.state.reanchoring import held_in_old_positions, move_to
from binlake.state.repair_ledger import RepairLedger
from binlake.state.store import StateStore
from tests.state.test_store import a_plan

OLD = BinlogOffset("binlog.000007", 900, "0-1-70")
NEW = BinlogOffset("binlog.000002", 400)
T, U = TableId("shop", "t"), TableId("shop", "u")


def _schema(table: TableId, *columns: str) -> CreateTable:
    return CreateTable(table, tuple(Column(c, "int", "int(11)") for c in columns), ("id",))


def test_chunk_windows_past_the_old_position_and_open_repairs_refuse_it(store: StateStore) -> None:
    store.plans("p").save([a_plan(T, [10])])
    (plan,) = store.plans("p").load()
    store.plans("p").finish_chunk(plan.chunks[0].chunk, BinlogOffset("binlog.000007", 100), OLD, 5)
    assert held_in_old_positions(store, "p", OLD, in_snapshot=True) == []  # up to the old position
    later = BinlogOffset("binlog.000007", 1200)
    store.plans("p").finish_chunk(plan.chunks[1].chunk, BinlogOffset("binlog.000007", 950), later, 5)
    assert held_in_old_positions(store, "p", OLD, in_snapshot=True) == [
        f"the stream is still inside its snapshot's window (up to {later})"
    ]
    assert held_in_old_positions(store, "p", OLD, in_snapshot=False) == []  # the snapshot is passed
    RepairLedger(store, "p").open(U, OLD, "a gap", "repair-1")
    assert held_in_old_positions(store, "p", OLD, in_snapshot=False) == [
        "tables are held back under repairs in the old binlog's positions"
    ]
    assert held_in_old_positions(store, "other", OLD, in_snapshot=True) == []  # another pipeline's


def test_the_record_moves_to_the_new_position_and_staged_backfills_go_stale(store: StateStore) -> None:
    history = store.schema_history("p")
    history.record(T, BinlogOffset("binlog.000001", 4), _schema(T, "id"), "snapshot")
    history.record(T, BinlogOffset("binlog.000005", 4), _schema(T, "id", "v"), "ALTER")
    history.record(U, BinlogOffset("binlog.000001", 4), _schema(U, "id"), "snapshot")
    history.record(U, BinlogOffset("binlog.000006", 4), None, "DROP")  # gone: not carried over
    ledger = BackfillLedger(store)
    ledger.create("p", "b1", [(T, "id", [ChunkRange.all()])])
    for name in (ANCHOR, ORIGIN, STREAM):
        store.offsets("p").save(name, OLD)

    move_to(store, "p", NEW, "failover")

    versions = store.schema_history("p").versions()
    assert [(v.table, v.offset, v.schema) for v in versions] == [(T, NEW, _schema(T, "id", "v"))]
    assert versions[0].cause == "re-anchored after: failover"
    (unit,) = ledger.units("p")
    assert unit.status == "stale"
    assert [store.offsets("p").load(n) for n in (ANCHOR, ORIGIN, STREAM)] == [NEW, NEW, NEW]
