"""Chunk groups packed into one Spark task per reader (``spark/chunk_jobs.packed``)."""

from __future__ import annotations

from typing import Any

from binlake.spark.chunk_jobs import packed


def _groups(*sizes: int) -> list[list[dict[str, Any]]]:
    return [[{"table": f"db.t{i}", "id": n} for n in range(size)] for i, size in enumerate(sizes)]


def test_groups_are_packed_into_one_task_per_reader_with_even_chunk_counts() -> None:
    groups = _groups(1, 1, 1, 3, 3, 2, 2, 2, 1)  # tails first, then the longest (chunk_groups' order)
    tasks = packed(groups, 2)
    assert len(tasks) == 2  # never more tasks than readers: each reader has its own server id
    assert sorted(i for task in tasks for i, _ in task) == list(range(len(groups)))  # each group once
    assert [[i for i, _ in task] for task in tasks] == [[0, 2, 4, 6, 8], [1, 3, 5, 7]]  # in order
    held = [sum(len(chunks) for _, chunks in task) for task in tasks]
    assert held == [8, 8]


def test_fewer_groups_than_readers_make_a_task_each() -> None:
    assert [[i for i, _ in task] for task in packed(_groups(4, 2), 8)] == [[0], [1]]
    assert packed([], 2) == [[]]
