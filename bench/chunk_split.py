"""Chunks of even rows on keys that are not spread evenly, as JSON.

    .venv/bin/python bench/chunk_split.py [--rows 1000000] [--chunk-size 8096]

Two tables of ``--rows`` rows in a private MariaDB: ``skewed`` (a dense first half, ids 1…n/2, then
a sparse half, one id in 400: the keys' distribution factor, ~200, is within the even split's
bounds) and ``gaps`` (ids 1…n/2, then 10¹²…: far outside them). Each is split by binlake's
splitter; every chunk's rows are counted on the server. The goal (issue 47): the largest chunk at
most 2 × the median. The reference, in the same run, is the plain even split of the same step
(what the splitter did before it asked the server for estimates), and ``split_s`` the planning time
beside the same splitter's on a uniform table of as many rows.
``bench/snapshot.py`` prints the same figures for ``--rows`` / 10.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
from typing import Any

from binlake.events import Column, CreateTable, TableId
from binlake.source.chunks.splitter import (
    ChunkRange,
    ChunkSplitter,
    distribution_factor,
    range_condition,
    split_evenly,
)
from binlake.testing.private_server import PrivateMariaDB, private_mariadb

#: ids of each shape: (SQL over seq_1_to_n for the first half, for the second half)
SHAPES = {
    "uniform": ("seq", "{half} + seq"),
    "skewed": ("seq", "{half} + seq * 400"),
    "gaps": ("seq", "1000000000000 + seq"),
}


def load(server: PrivateMariaDB, name: str, rows: int) -> None:
    half = rows // 2
    low, high = (part.format(half=half) for part in SHAPES[name])
    server.execute("CREATE DATABASE IF NOT EXISTS bench_split")
    server.execute(
        f"CREATE TABLE bench_split.{name} (id BIGINT PRIMARY KEY, note VARCHAR(40))",
        f"INSERT INTO bench_split.{name} SELECT {low}, REPEAT('x', 30) FROM seq_1_to_{half}",
        f"INSERT INTO bench_split.{name} SELECT {high}, REPEAT('x', 30) FROM seq_1_to_{rows - half}",
        f"ANALYZE TABLE bench_split.{name}",
        database="bench_split",
    )


def sizes(server: PrivateMariaDB, table: str, ranges: list[ChunkRange]) -> list[int]:
    counted = []
    for chunk in ranges:
        where, params = range_condition("id", chunk)
        counted.append(server.query(f"SELECT COUNT(*) FROM bench_split.{table} WHERE {where}", params)[0][0])
    return counted


def spread(counts: list[int]) -> dict[str, Any]:
    median = statistics.median(counts)
    return {
        "chunks": len(counts),
        "largest": max(counts),
        "median": median,
        "largest_over_median": round(max(counts) / max(1, median), 2),
    }


def measure(server: PrivateMariaDB, rows: int, chunk_size: int) -> dict[str, Any]:
    """Each shape's chunks by binlake's splitter, and the plain even split's of the same step."""
    found: dict[str, Any] = {}
    for name in SHAPES:
        load(server, name, rows)
        schema = CreateTable(
            TableId("bench_split", name),
            (Column("id", "bigint", "bigint(20)", nullable=False), Column("note", "varchar", "varchar(40)")),
            ("id",),
        )
        with contextlib.closing(server.admin_connection()) as conn:
            started = time.monotonic()
            plan = ChunkSplitter(conn, chunk_size).split(schema)
            seconds = time.monotonic() - started
        result = {
            "strategy": plan.strategy,
            "split_s": round(seconds, 3),
            **spread(sizes(server, name, [c.range for c in plan.chunks])),
        }
        if plan.strategy == "even" and name != "uniform":
            step = max(
                1, int(chunk_size * distribution_factor(plan.min_key, plan.max_key, plan.estimated_rows))
            )
            result["even_split_reference"] = spread(
                sizes(server, name, split_evenly(plan.min_key, plan.max_key, step))
            )
        found[name] = result
    found["goal_largest_over_median"] = 2.0
    return found


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=8096)
    args = parser.parse_args()
    with private_mariadb() as server:
        result = {"benchmark": "chunk_split", "rows": args.rows, "chunk_size": args.chunk_size}
        print(json.dumps({**result, **measure(server, args.rows, args.chunk_size)}))


if __name__ == "__main__":
    main()
