"""How a snapshot's chunks are grouped into Spark tasks."""

from __future__ import annotations

from binlake.events import TableId
from binlake.snapshot.chunks import chunk_groups
from binlake.source.chunks.splitter import Chunk, ChunkRange, split_evenly
from binlake.state.plans import ChunkState


def _states(table: TableId, borders: list[ChunkRange]) -> list[ChunkState]:
    return [ChunkState(Chunk(table, i, "id", r), "pending") for i, r in enumerate(borders)]


def test_each_tables_last_chunk_is_read_first_and_alone() -> None:
    """The ``[x, +inf)`` chunk holds every row inserted until it is read: on a table growing during
    its snapshot, read last it would hold all of them."""
    orders, items = TableId("shop", "orders"), TableId("shop", "items")
    pending = _states(orders, split_evenly(1, 100, 10)) + _states(items, split_evenly(1, 30, 10))
    groups = chunk_groups(pending, parallelism=2, chunks_per_task=3)
    tails = [(g[0]["table"], g[0]["id"]) for g in groups[:2]]
    assert tails == [("shop.items", 2), ("shop.orders", 9)]
    assert all(len(g) == 1 and g[0]["end"] is None for g in groups[:2])
    rest = [(c["table"], c["id"]) for g in groups[2:] for c in g]
    assert all(c["end"] is not None for g in groups[2:] for c in g)
    assert sorted(rest + tails) == sorted((s.chunk.table.name, s.chunk.chunk_id) for s in pending)
    assert max(len(g) for g in groups) <= 3
