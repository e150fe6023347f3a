"""How a snapshot's chunks are grouped into Spark tasks."""

from __future__ import annotations

from binlake.events import TableId
from binlake.snapshot.chunks import chunk_groups, chunk_waves
from binlake.source.chunks.splitter import Chunk, ChunkRange, split_evenly
from binlake.state.plans import ChunkState


def _states(table: TableId, borders: list[ChunkRange]) -> list[ChunkState]:
    return [ChunkState(Chunk(table, i, "id", r), "pending") for i, r in enumerate(borders)]


def test_each_tables_last_chunk_is_read_first_heading_the_chunks_before_it() -> None:
    """The ``[x, +inf)`` chunk holds every row inserted until it is read: on a table growing during
    its snapshot, read last it would hold all of them. In a snapshot of one Spark job it heads its
    table's last run (a task less per table), in key order after it."""
    orders, items = TableId("shop", "orders"), TableId("shop", "items")
    pending = _states(orders, split_evenly(1, 100, 10)) + _states(items, split_evenly(1, 30, 10))
    groups = chunk_groups(pending, parallelism=2, chunks_per_task=3)  # 13 chunks: one job holds 24
    assert [[(c["table"], c["id"]) for c in g] for g in groups[:2]] == [
        [("shop.orders", 9), ("shop.orders", 8)],
        [("shop.items", 2)],
    ]
    assert [g[0]["end"] for g in groups[:2]] == [None, None]
    assert all(c["end"] is not None for g in groups[2:] for c in g)
    assert [len(g) for g in groups[2:]] == [2, 2, 2, 2, 2]
    read = [(c["table"], c["id"]) for g in groups for c in g]
    assert sorted(read) == sorted((s.chunk.table.name, s.chunk.chunk_id) for s in pending)
    assert max(len(g) for g in groups) <= 3
    assert chunk_waves(groups, parallelism=2, chunks_per_task=3) == [groups]


def test_a_snapshot_of_several_jobs_reads_each_last_chunk_alone_in_the_first() -> None:
    """Beyond one job the last chunks stay groups of their own: the first job holds them all (each
    read first) and still at most what a crash may lose besides them."""
    orders, items = TableId("shop", "orders"), TableId("shop", "items")
    pending = _states(orders, split_evenly(1, 100, 10)) + _states(items, split_evenly(1, 30, 10))
    groups = chunk_groups(pending, parallelism=1, chunks_per_task=2)  # 13 chunks: a job holds 8
    assert [[(c["table"], c["id"]) for c in g] for g in groups[:2]] == [
        [("shop.items", 2)],
        [("shop.orders", 9)],
    ]
    assert all(c["end"] is not None for g in groups[2:] for c in g)
    waves = chunk_waves(groups, parallelism=1, chunks_per_task=2)
    assert waves[0][:2] == groups[:2]
    assert [sum(len(g) for g in w if g[0]["end"] is not None) for w in waves] == [8, 3]


def test_a_tables_groups_are_even_longest_first_and_the_tails_ride_in_the_first_job() -> None:
    """37 chunks in groups of at most 11 make 10, 9, 9 and 9 (not three of 11 and one of 4: a slot
    would wait for the other); groups come longest first; each table's last chunk is read in the
    first Spark job, beside the first groups, not in jobs of their own."""
    orders, items, tiny = TableId("shop", "orders"), TableId("shop", "items"), TableId("shop", "tiny")
    pending = (
        _states(orders, split_evenly(1, 3700, 100))  # 37 chunks: 36 and the tail
        + _states(items, split_evenly(1, 500, 100))  # 5: 4 and the tail
        + _states(tiny, split_evenly(1, 50, 100))  # its one chunk is its tail
    )
    groups = chunk_groups(pending, parallelism=1, chunks_per_task=32)
    bounded = [(g[0]["table"], len(g)) for g in groups if g[0]["end"] is not None]
    assert bounded == [("shop.orders", 10), ("shop.orders", 9), ("shop.orders", 9)]
    waves = chunk_waves(groups, parallelism=1, chunks_per_task=32)
    first = waves[0]
    headed = [(g[0]["table"], len(g)) for g in first if g[0]["end"] is None]
    assert headed == [("shop.orders", 9), ("shop.items", 5), ("shop.tiny", 1)]
    # 43 chunks, under the 128 a job may hold (parallelism × 4 × 32): one job, not a second one for
    # the last group
    assert [len(w) for w in waves] == [6]
    assert sorted(c["id"] for w in waves for g in w for c in g if c["table"] == "shop.orders") == list(
        range(37)
    )


def test_a_job_holds_at_most_what_a_crash_may_lose() -> None:
    """Jobs are cut by chunks — ``parallelism × 4 × chunks_per_task`` at most, each job as full as
    whole groups make it — so a crash loses at most that many chunks' reads."""
    orders, items = TableId("shop", "orders"), TableId("shop", "items")
    pending = _states(orders, split_evenly(1, 3700, 100)) + _states(items, split_evenly(1, 500, 100))
    groups = chunk_groups(pending, parallelism=1, chunks_per_task=8)
    bounded = [len(g) for g in groups if g[0]["end"] is not None]
    assert bounded == [8, 7, 7, 7, 7, 4]
    waves = chunk_waves(groups, parallelism=1, chunks_per_task=8)
    sizes = [[len(g) for g in w if g[0]["end"] is not None] for w in waves]
    assert sizes == [[8, 7, 7, 7], [7, 4]]
    assert [sum(1 for g in w if g[0]["end"] is None) for w in waves] == [2, 0]
    assert sorted((c["table"], c["id"]) for w in waves for g in w for c in g) == sorted(
        (s.chunk.table.name, s.chunk.chunk_id) for s in pending
    )


def test_small_tables_share_groups_after_the_tails_and_big_tables_keep_theirs() -> None:
    """A database of many small tables (each smaller than a chunk) paid a Spark task, a replica
    claim and a connection per table: tables of one chunk share groups, as many as a group holds;
    a bigger table's last chunk is still read first."""
    orders = TableId("shop", "orders")
    small = [TableId("shop", f"lookup_{i:02}") for i in range(10)]
    pending = _states(orders, split_evenly(1, 500, 100)) + [
        s for t in small for s in _states(t, split_evenly(1, 50, 100))
    ]
    groups = chunk_groups(pending, parallelism=1, chunks_per_task=4)
    assert [(c["table"], c["id"]) for c in groups[0]] == [("shop.orders", 4), ("shop.orders", 3)]
    shared = [[c["table"] for c in g] for g in groups[1:4]]
    assert shared == [[t.name for t in small[i : i + 4]] for i in range(0, 10, 4)]
    assert all(c["end"] is None for g in groups[1:4] for c in g)
    assert [[(c["table"], c["id"]) for c in g] for g in groups[4:]] == [
        [("shop.orders", i) for i in range(3)]
    ]
    waves = chunk_waves(groups, parallelism=1, chunks_per_task=4)
    assert [len(g) for g in waves[0][:4]] == [2, 4, 4, 2], "the tails and the small tables ride first"
    assert sorted((c["table"], c["id"]) for w in waves for g in w for c in g) == sorted(
        (s.chunk.table.name, s.chunk.chunk_id) for s in pending
    )
