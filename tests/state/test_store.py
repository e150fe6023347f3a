"""The state store on SQLite (default) and PostgreSQL (at scale): plans and chunk progress."""

from __future__ import annotations

import datetime as dt
import itertools
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from binlake.events import AddColumn, Column, CreateTable, RenameTable, TableId
from binlake.offsets import BinlogOffset
from binlake.source.chunks.splitter import Chunk, ChunkRange, SplitPlan
from binlake.state import store as state_store
from binlake.state.codec import decode_key, encode_key
from binlake.state.store import StateStore, StateStoreLockedError


@pytest.mark.parametrize(
    "value",
    [
        None, 0, -(2**63), 2**64 - 1, Decimal("-12.3400"), 1.5, "", "Ünïcode 🎉", b"\x00\xff" * 8,
        dt.datetime(2024, 2, 29, 23, 59, 59, 999999), dt.date(1000, 1, 1), dt.timedelta(hours=-838), True,
    ],
)  # fmt: skip
def test_codec_keeps_value_and_type(value: Any) -> None:
    decoded = decode_key(encode_key(value))
    assert decoded == value
    assert type(decoded) is type(value)


def test_codec_refuses_unknown_types() -> None:
    with pytest.raises(TypeError, match="cannot store a chunk key of type object"):
        encode_key(object())


def a_plan(table: TableId, borders: list[Any]) -> SplitPlan:
    edges = [None, *borders, None]
    chunks = tuple(
        Chunk(table, i, "id", ChunkRange(a, b)) for i, (a, b) in enumerate(itertools.pairwise(edges))
    )
    return SplitPlan(table, "id", "uneven", "test", chunks, borders[0], borders[-1], 123)


def test_save_load_and_finish(store: StateStore) -> None:
    orders, coupons = TableId("shop", "orders"), TableId("shop", "coupons")
    store.plans("p").save([a_plan(orders, [2**64 - 5, 2**64 - 2]), a_plan(coupons, ["Bravo", "delta"])])
    store.plans("other").save([a_plan(orders, [1])])
    plans = {p.table: p for p in store.plans("p").load()}
    assert [c.chunk.range for c in plans[orders].chunks] == [
        ChunkRange(None, 2**64 - 5),
        ChunkRange(2**64 - 5, 2**64 - 2),
        ChunkRange(2**64 - 2, None),
    ]
    assert plans[coupons].max_key == "delta"
    assert plans[orders].finished == 0

    low, high = BinlogOffset("binlog.000003", 100, "0-1-7"), BinlogOffset("binlog.000004", 4)
    store.plans("p").finish_chunk(plans[orders].chunks[1].chunk, low, high, 42)
    (reloaded,) = store.plans("p").load([orders])
    state = reloaded.chunks[1]
    assert (state.status, state.low_watermark, state.high_watermark, state.row_count) == (
        "finished",
        low,
        high,
        42,
    )
    assert state.low_watermark is not None
    assert state.low_watermark.gtid == "0-1-7"
    assert reloaded.finished == 1
    assert len(store.plans("other").load()[0].chunks) == 2


def test_replacing_a_plan_resets_its_chunks_only(store: StateStore) -> None:
    orders, coupons = TableId("shop", "orders"), TableId("shop", "coupons")
    store.plans("p").save([a_plan(orders, [10]), a_plan(coupons, [5])])
    first = store.plans("p").load([coupons])[0].chunks[0].chunk
    store.plans("p").finish_chunk(first, BinlogOffset("b.000001", 4), BinlogOffset("b.000001", 9), 1)
    store.plans("p").save([a_plan(orders, [10, 20, 30])])
    plans = {p.table: p for p in store.plans("p").load()}
    assert len(plans[orders].chunks) == 4
    assert plans[coupons].finished == 1


def test_finishing_an_unknown_chunk_is_an_error(store: StateStore) -> None:
    with pytest.raises(KeyError, match="not in the plan"):
        store.plans("p").finish_chunk(
            Chunk(TableId("a", "b"), 0, "id", ChunkRange.all()),
            BinlogOffset("b.1", 4),
            BinlogOffset("b.1", 4),
            0,
        )


# -- schema history and schema change requests -----------------------------------------------------


def test_schema_history_answers_by_position(store: StateStore) -> None:
    t = TableId("db", "t")
    v1 = CreateTable(t, (Column("id", "int", "int(11)"),), ("id",), collation="utf8mb4_general_ci")
    v2 = CreateTable(t, (*v1.columns, Column("v", "varchar", "varchar(5)", length=5)), ("id",))
    at1, at2 = BinlogOffset("binlog.000002", 4000), BinlogOffset("binlog.000010", 12)
    store.schema_history("p").record(t, at1, v1, "snapshot")
    store.schema_history("p").record(t, at2, v2, "add column")
    store.schema_history("p").record(t, at2, v2, "add column")  # a replay records it once
    store.schema_history("p").record(t, BinlogOffset("binlog.000011", 4), None, "drop table")
    assert store.schema_history("p").at(t, BinlogOffset("binlog.000002", 3999)) is None
    assert store.schema_history("p").at(t, at1).schema == v1  # type: ignore[union-attr]
    # file number before position: binlog.000009:999999 is before binlog.000010:12
    assert store.schema_history("p").at(t, BinlogOffset("binlog.000009", 999999)).schema == v1  # type: ignore[union-attr]
    assert store.schema_history("p").at(t, at2).schema == v2  # type: ignore[union-attr]
    assert store.schema_history("p").at(t, BinlogOffset("binlog.000012", 4)).schema is None  # type: ignore[union-attr]
    assert [v.cause for v in store.schema_history("p").versions(t)] == [
        "snapshot",
        "add column",
        "drop table",
    ]
    assert store.schema_history("other").at(t, at2) is None
    store.schema_history("p").delete()
    assert store.schema_history("p").versions() == []
    # A new snapshot's history: the old versions forgotten, the schemas it read from its switch on.
    store.schema_history("p").record(t, at1, v1, "snapshot")
    u = TableId("db", "u")
    store.schema_history("p").restart(at2, {t: v2, u: v1}, "snapshot")
    versions = sorted(store.schema_history("p").versions(), key=lambda v: v.table.name)
    assert [(v.table, v.offset, v.schema, v.cause) for v in versions] == [
        (t, at2, v2, "snapshot"),
        (u, at2, v1, "snapshot"),
    ]


def test_an_offset_is_stored_with_others_forgotten_in_one_transaction(store: StateStore) -> None:
    at = BinlogOffset("binlog.000004", 4)
    store.offsets("p").save("stream", BinlogOffset("binlog.000003", 9))
    store.offsets("p").save("origin", BinlogOffset("binlog.000002", 9))
    store.offsets("p").save("switch", at, forget=("stream", "origin"))
    assert [store.offsets("p").load(n) for n in ("switch", "stream", "origin")] == [at, None, None]


def test_schema_change_requests(store: StateStore) -> None:
    t = TableId("db", "t")
    add = AddColumn(t, Column("v", "enum", "enum('a')", values=("a",)), "after", "id")
    at = BinlogOffset("binlog.000003", 777)
    first = store.schema_requests("p").request(at, 0, add, "lenient")
    again = store.schema_requests("p").request(at, 0, add, "lenient")  # a replay finds the same record
    assert first == again
    assert (first.change, first.status, first.table) == (add, "pending", t)
    rename = RenameTable(t, TableId("db", "u"))
    store.schema_requests("p").request(at, 1, rename, "lenient")
    assert [r.change for r in store.schema_requests("p").all("pending")] == [add, rename]
    store.schema_requests("p").finish(at, 0, "applied", None)
    store.schema_requests("p").finish(at, 1, "failed", "the sink refused it")
    assert store.schema_requests("p").all("pending") == []
    done = store.schema_requests("p").all()
    assert [(r.status, r.message) for r in done] == [("applied", None), ("failed", "the sink refused it")]
    assert done[0].finished_at is not None


def test_a_holder_fails_at_once_or_waits_for_the_lease_as_told(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from binlake.state import leases
    from binlake.state.holders import Holder
    from binlake.state.leases import Command, TableBusyError

    monkeypatch.setattr(leases, "RETRY_S", 0.1)
    maintain, snapshot, stream = (
        Holder.this_process(c) for c in (Command.MAINTAIN, Command.SNAPSHOT, Command.STREAM)
    )
    held = store.leases("p")
    held.hold(["ns.t", "ns.u"], maintain, dt.timedelta(seconds=1))
    with pytest.raises(TableBusyError, match=r"`ns\.t` is held by `binlake maintain`") as refused:
        held.hold(["ns.t"], snapshot, dt.timedelta(minutes=5))  # no wait: refused at once
    assert refused.value.lease.holder == Command.MAINTAIN
    held.hold(["ns.t", "ns.u"], maintain, dt.timedelta(seconds=1))  # its own lease: renewed
    # The stream waits: the maintenance lease expires (its holder is gone), and the stream takes it.
    held.hold(["ns.t", "ns.u"], stream, dt.timedelta(minutes=5), wait_s=10)
    with pytest.raises(TableBusyError, match="held by `binlake stream`"):
        held.hold(["ns.u"], maintain, dt.timedelta(minutes=5), wait_s=0.3)
    held.release("ns.u", stream)
    held.hold(["ns.u"], maintain, dt.timedelta(minutes=5))


def test_a_holder_takes_all_its_tables_or_none_and_gives_them_up_together(store: StateStore) -> None:
    """Holding several tables is one transaction: refused for one, it holds none of them."""
    from binlake.state.holders import Holder
    from binlake.state.leases import Command, TableBusyError

    maintain, snapshot = (Holder.this_process(c) for c in (Command.MAINTAIN, Command.SNAPSHOT))
    held = store.leases("p")
    held.hold(["ns.u"], maintain, dt.timedelta(minutes=5))
    with pytest.raises(TableBusyError, match=r"`ns\.u` is held by `binlake maintain`"):
        held.hold(["ns.t", "ns.u", "ns.v"], snapshot, dt.timedelta(minutes=5))
    held.hold(["ns.t", "ns.v"], maintain, dt.timedelta(minutes=5))  # not taken by the refused snapshot
    held.release_all(["ns.t", "ns.u", "ns.v"], snapshot)  # not its leases: they stay
    with pytest.raises(TableBusyError):
        held.hold(["ns.v"], snapshot, dt.timedelta(minutes=5))
    held.release_all(["ns.t", "ns.u", "ns.v"], maintain)
    held.hold(["ns.t", "ns.u", "ns.v"], snapshot, dt.timedelta(minutes=5))


def test_a_state_database_written_before_the_split_keeps_working(tmp_path: Path) -> None:
    """``tests/data/state/f4e65c4.db`` was written by the one-class store of f4e65c4 (a plan with
    a chunk read, offsets, a stream batch, a schema version, a pending schema change, a lease, a
    quality result): the split store reads and extends it as it is."""
    import shutil

    from binlake.state.holders import Holder
    from binlake.state.leases import Command, TableBusyError

    path = tmp_path / "state.db"
    shutil.copy(Path(__file__).parents[1] / "data" / "state" / "f4e65c4.db", path)
    t = TableId("shop", "orders")
    with StateStore(f"sqlite:///{path}") as store:
        (plan,) = store.plans("demo").load()
        assert (plan.table, plan.finished, len(plan.chunks)) == (t, 1, 2)
        assert plan.chunks[0].high_watermark == BinlogOffset("binlog.000002", 900)
        assert store.offsets("demo").load("switch") == BinlogOffset("binlog.000002", 900)
        assert store.offsets("demo").load("stream") == BinlogOffset("binlog.000003", 1200)
        (batch,) = store.stream_history("demo").batches()
        assert (batch.batch_id, batch.changes) == (0, {"shop.orders": {"insert": 3}})
        version = store.schema_history("demo").at(t, BinlogOffset("binlog.000003", 1))
        assert version is not None
        assert version.schema is not None
        assert [c.name for c in version.schema.columns] == ["id", "v"]
        (request,) = store.schema_requests("demo").all("pending")
        assert isinstance(request.change, AddColumn)
        assert (request.change.column.name, request.change.position, request.change.after) == (
            "w",
            "after",
            "v",
        )
        (result,) = store.quality("demo").results()
        assert (result.run_name, result.success) == ("q-1", True)
        with pytest.raises(TableBusyError, match="held by `binlake stream`"):
            store.leases("demo").hold(
                ["shop.orders"], Holder.this_process(Command.MAINTAIN), dt.timedelta(minutes=5)
            )
        # and it goes on: the next chunk, offset, batch
        store.plans("demo").finish_chunks([(t, 1, None, BinlogOffset("binlog.000002", 950), 81)])
        store.offsets("demo").save("stream", BinlogOffset("binlog.000004", 4))
        assert store.plans("demo").load()[0].finished == 2
        assert store.offsets("demo").load("stream") == BinlogOffset("binlog.000004", 4)


def test_a_sqlite_store_held_by_another_process_is_named_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process stopped inside a write keeps SQLite's lock; a writer that waited for it in vain
    gets binlake's message (which file, why, what to do), not SQLite's "database is locked"."""
    path = tmp_path / "state.db"
    with StateStore(f"sqlite:///{path}") as store:
        store.plans("p").save([a_plan(TableId("shop", "t"), [10])])
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(state_store, "SQLITE_BUSY_S", 0.3)
        with pytest.raises(StateStoreLockedError) as info:
            with StateStore(f"sqlite:///{path}") as store:
                store.plans("p").load()
        message = str(info.value)
        assert f"Could not write the state store `{path}`" in message
        assert "binlake waited up to 0.3 s" in message
        assert "PostgreSQL state store" in message
    finally:
        holder.kill()
        holder.wait()
    with StateStore(f"sqlite:///{path}") as store:  # the lock went with the process
        assert [p.table for p in store.plans("p").load()] == [TableId("shop", "t")]


#: Takes the file's write lock and keeps it, as a process stopped inside a write does.
HOLD_LOCK = """
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")
print("held", flush=True)
time.sleep(60)
"""
