"""Which staged backfill units a batch takes, and which of its changes go on top of them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from binlake.events import Column, CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.source.chunks.splitter import ChunkRange
from binlake.state.backfills import BackfillLedger, StagedChunk
from binlake.state.store import StateStore
from binlake.stream.backfill import StagedBackfills, _keep, _Range
from binlake.stream.records import change_schema, empty_changes

T = TableId("db", "t")
SCHEMA = CreateTable(T, (Column("id", "int", "int", False),), ("id",))


def offset(pos: int) -> BinlogOffset:
    return BinlogOffset("binlog.000001", pos)


def staged(ledger: BackfillLedger, backfill_id: str, ranges: list[ChunkRange], high: int) -> None:
    ledger.create("p", backfill_id, [(T, "id", ranges)])
    [unit] = ledger.units("p", backfill_id)
    chunks = [StagedChunk(r, offset(high - 10), offset(high), 1) for r in ranges]
    ledger.stage("p", unit, chunks, [])


def test_due_units_reach_their_watermarks_and_overlapping_ones_wait_a_batch(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    ledger = BackfillLedger(store)
    staged(ledger, "a", [ChunkRange(None, 100), ChunkRange(100, 200)], high=500)
    staged(ledger, "b", [ChunkRange(150, 300)], high=400)  # overlaps a
    staged(ledger, "c", [ChunkRange(300, None)], high=900)
    backfills = StagedBackfills("p", ledger, lambda *_: empty_changes(SCHEMA))
    assert [u.backfill_id for u in backfills.due(offset(450))["db.t"]] == ["b"]  # a is not due yet
    due = backfills.due(offset(600))
    assert [u.backfill_id for u in due["db.t"]] == ["a"]  # b overlaps a: next batch
    backfills.applied(due["db.t"])
    assert [u.backfill_id for u in backfills.due(offset(600))["db.t"]] == ["b"]
    assert [u.backfill_id for u in backfills.due(offset(1000))["db.t"]] == ["b", "c"]
    store.close()


def change(key: int | None, at: int) -> dict[str, object]:
    return {"op": "insert", "at": at, "idx": 0, "ts": 0, "row": {"id": key}}


def test_changes_in_a_range_apply_after_its_chunk_and_others_as_asked() -> None:
    h1, h2 = offset(100).packed, offset(200).packed
    ranges = [_Range(None, 10, h1), _Range(10, 20, h2), _Range(30, 40, h1)]
    rows = pa.Table.from_pylist(
        [change(None, h1 + 1), change(5, h1), change(15, h1 + 1), change(15, h2 + 1), change(25, 1),
         change(35, h1 + 5)],
        schema=change_schema(SCHEMA),
    )  # fmt: skip
    # NULL keys live in the first chunk; 25 lies between the ranges.
    assert _keep(rows, "id", ranges, outside=True).to_pylist() == [True, False, False, True, True, True]
    assert _keep(rows, "id", ranges, outside=False).to_pylist() == [True, False, False, True, False, True]


def test_staged_files_go_once_their_units_are_applied_or_stale(tmp_path: Path) -> None:
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    ledger = BackfillLedger(store)
    files = {}
    for backfill_id in ("a", "b"):
        ledger.create("p", backfill_id, [(T, "id", [ChunkRange(None, None)])])
        [unit] = ledger.units("p", backfill_id)
        files[backfill_id] = tmp_path / f"{backfill_id}.parquet"
        pq.write_table(pa.table({"id": [1]}), files[backfill_id])
        ledger.stage(
            "p",
            unit,
            [StagedChunk(ChunkRange(None, None), offset(1), offset(2), 1)],
            [files[backfill_id].as_uri()],
        )
    backfills = StagedBackfills("p", ledger, lambda *_: empty_changes(SCHEMA))
    backfills.applied(ledger.units("p", "a"))
    backfills.stale(ledger.units("p", "b"), "the schema changed")
    assert [u.status for u in ledger.units("p")] == ["applied", "stale"]
    assert not files["a"].exists()
    assert not files["b"].exists()  # a rerun reads a stale unit again, into new files
    store.close()
