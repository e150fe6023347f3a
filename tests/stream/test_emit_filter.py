"""The snapshot filter (Flink CDC's shouldEmit) on its own: which changes a chunk already holds."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from pydantic import SecretStr

from binlake.config import SourceConfig
from binlake.events import Column, CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.source.chunks.splitter import Chunk, ChunkRange
from binlake.state.store import ChunkState, StoredPlan
from binlake.stream.emit_filter import SnapshotFilter

T = TableId("db", "t")
SCHEMA = CreateTable(T, (Column("id", "int", "int(11)", nullable=False),), ("id",))
SOURCE = SourceConfig(hostname="unused", username="u", password=SecretStr("p"), tables=[r"db\.t"])


def at(pos: int) -> BinlogOffset:
    return BinlogOffset("binlog.000001", pos)


def _filter() -> SnapshotFilter:
    """Chunks [-, 100) read up to 500, [100, 200) up to 300, [200, -) up to 700."""
    bounds = [(None, 100, 500), (100, 200, 300), (200, None, 700)]
    chunks = tuple(
        ChunkState(Chunk(T, i, "id", ChunkRange(start, end)), "finished", at(high - 50), at(high))
        for i, (start, end, high) in enumerate(bounds)
    )
    plan = StoredPlan(T, "id", "split", "test", 300, 1, 299, dt.datetime.now(dt.UTC), chunks)
    return SnapshotFilter(SOURCE, [plan], {T.name: SCHEMA})


def _changes(*rows: tuple[int | None, int]) -> pa.Table:
    """(key, position) pairs as a change table's ``at`` and ``row`` columns."""
    keys = pa.array([k for k, _ in rows], pa.int32())
    return pa.table(
        {
            "at": pa.array([at(p).packed for _, p in rows], pa.int64()),
            "row": pa.StructArray.from_arrays([keys], names=["id"]),
        }
    )


def _kept(rows: pa.Table) -> list[tuple[int | None, int]]:
    ats = {at(p).packed: p for p in range(0, 1000)}
    return [(r["row"]["id"], ats[r["at"]]) for r in rows.to_pylist()]


def test_a_change_counts_only_after_its_own_chunk_s_high_watermark() -> None:
    rows = _changes((5, 400), (5, 600), (150, 250), (150, 400), (250, 600), (250, 800))
    assert _kept(_filter().keep(T.name, rows)) == [(5, 600), (150, 400), (250, 800)]


def test_null_keys_belong_to_the_first_chunk() -> None:
    assert _kept(_filter().keep(T.name, _changes((None, 400), (None, 550)))) == [(None, 550)]


def test_past_the_last_high_watermark_everything_passes() -> None:
    snapshot = _filter()
    assert snapshot.passes_all(T.name, at(701).packed)
    assert not snapshot.passes_all(T.name, at(700).packed)
    assert snapshot.passes_all("db.other", 0)  # a table the snapshot did not read


def test_the_snapshot_holds_what_lies_before_every_chunk() -> None:
    snapshot = _filter()
    assert snapshot.holds(T.name, at(300).packed)
    assert not snapshot.holds(T.name, at(301).packed)
