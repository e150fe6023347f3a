"""A changelog batch's and a history batch's cost (``sink.modes: [upsert, changelog, history]``)
against an upsert batch of the same changes, at a table size and 4× it, in one run.

    .venv/bin/python bench/changelog.py [--rows 500000] [--batches 16] [--changes 20000]

Each batch: ``--changes`` changes of random keys (90 % updates, 10 % deletes), as the stream's
change table (an update's before and after image). The changelog side turns them into changelog
rows (``sink/history/changelog.py``) and appends them exactly once (``ChangelogWriter.append_batch``);
the history side closes and opens the versions they make (``sink/history/scd2.py``: the versions
it closes from the batch's before images and the current versions' index, as the stream writes it;
the reference, ``history, reading``: from the stored versions, as before that index); the
upsert side merges the batch's last change per key into the upsert table, copy-on-write (the default
before merge-on-read) and in the O(changes) layout (merge-on-read, key index, compaction: today's
default, as the stream writes it). Prints one JSON
object: median seconds per batch per side and size, ``cost_growth_4x`` (median at 4× ÷ at 1×;
the changelog's goal: ≤ 1.1) and ``versus_upsert`` (the changelog's and the history's median ÷
each upsert layout's, same size).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from merge import DAYS, INDEXED, LAYOUTS, SCHEMA, TABLE, rows
from pyiceberg.catalog.sql import SqlCatalog

from binlake.config import StreamConfig
from binlake.offsets import BinlogOffset
from binlake.sink.compaction import CompactionPolicy
from binlake.sink.history.changelog import changelog_rows, ensure_changelog
from binlake.sink.history.changelog_writer import ChangelogWriter
from binlake.sink.history.scd2 import ensure_history
from binlake.sink.history.scd2_writer import HistoryWriter
from binlake.sink.history.state_table import StateTable
from binlake.sink.layout import TableLayout
from binlake.sink.metadata_applier import IcebergMetadataApplier
from binlake.sink.pyiceberg_internals import cache_immutable_files
from binlake.sink.writer import IcebergWriter
from binlake.stream.records import images

UPSERT_LAYOUTS = {
    "upsert, copy-on-write": "copy-on-write (the old default)",
    "upsert, merge-on-read, key index, compaction": (
        "sorted, 8 MiB files, merge-on-read, key index, compaction"
    ),
}
#: The history writing as before its current versions' index: the versions a batch closes read from the table.
READING = "history, reading"
ROW = pa.struct([f.with_nullable(True) for f in SCHEMA])


def batches(table_rows: int, changes: int, count: int, step_s: float) -> list[pa.Table]:
    """``count`` change tables of ``changes`` changes each (``stream.records``' columns)."""
    rng = random.Random(42)
    out, at = [], (1 << 32) + 1000  # past where the changelog starts (position 4)
    for version in range(1, count + 1):
        keys = rng.sample(range(1, table_rows + 1), changes)
        updated, deleted = sorted(keys[changes // 10 :]), sorted(keys[: changes // 10])
        before = rows(updated, rng, version - 1, table_rows, step_s)
        after = rows(updated, rng, version, table_rows, step_s)
        gone = rows(deleted, rng, version - 1, table_rows, step_s)
        n = len(updated)
        parts = [
            _changes(["before"] * n, at, [2 * i for i in range(n)], before),
            _changes(["update"] * n, at, [2 * i + 1 for i in range(n)], after),
            _changes(["delete"] * len(deleted), at + 1, [2 * i for i in range(len(deleted))], gone),
        ]
        table = pa.concat_tables(parts).sort_by([("at", "ascending"), ("idx", "ascending")])
        out.append(table)
        at += 1000
    return out


def _changes(ops: list[str], at: int, idx: list[int], images_: pa.Table) -> pa.Table:
    n = len(ops)
    return pa.table(
        {
            "op": pa.array(ops, pa.string()),
            "at": pa.array([at] * n, pa.int64()),
            "idx": pa.array(idx, pa.int32()),
            "ts": pa.array([1_735_600_000] * n, pa.int64()),
            "row": pa.StructArray.from_arrays(
                [c.combine_chunks() for c in images_.columns], fields=list(ROW)
            ),
            "absent": pa.nulls(n, pa.binary()),
        }
    )


def _last_per_key(changes: pa.Table) -> tuple[pa.Table, pa.Table]:
    """The upsert side's input: the after images, and the deleted keys."""
    ops = changes.column("op")
    upserts = images(changes.filter(pa.compute.equal(ops, "update")))
    deletes = images(changes.filter(pa.compute.equal(ops, "delete")), ["id"])
    return upserts, deletes


def _companion(side: str, catalog: Any, upsert: Any, index: Path) -> ChangelogWriter:
    """The changelog or history table, holding the upsert table's rows (as reads, or versions);
    a history written as the stream writes it (its key index, compaction)."""
    name = f"bench.orders_{side.split(',')[0]}"
    if side == "changelog":
        ensure_changelog(catalog, name, upsert.schema())
        writer = ChangelogWriter(catalog, name)
    else:
        ensure_history(catalog, name, upsert.schema(), ["id"])
        writer = HistoryWriter(catalog, name, ["id"], key_index_dir=index, compaction=CompactionPolicy())
    writer.start_from(StateTable.upsert(upsert), BinlogOffset("binlog.000001", 4), [])
    return writer


def run(side: str, table_rows: int, args: argparse.Namespace) -> dict[str, Any]:
    step_s = DAYS * 86_400 / args.rows
    work = batches(table_rows, args.changes, args.batches, step_s)
    with tempfile.TemporaryDirectory(prefix="binlake-bench-") as tmp:
        warehouse = Path(tmp) / "warehouse"
        warehouse.mkdir()
        catalog = SqlCatalog("bench", uri=f"sqlite:///{tmp}/catalog.db", warehouse=f"file://{warehouse}")
        layout_name = UPSERT_LAYOUTS.get(side)
        layout = LAYOUTS[layout_name] if layout_name else TableLayout()
        IcebergMetadataApplier(catalog, lambda t: (t.database, t.table), layout).apply(TABLE)
        upsert = catalog.load_table("bench.orders")
        upsert.append(rows(list(range(1, table_rows + 1)), random.Random(7), 0, table_rows, step_s))
        upsert.refresh()
        seconds = []
        if side in ("changelog", "history", READING):
            writer: IcebergWriter = _companion(side, catalog, upsert, Path(tmp) / "index")
        else:
            indexed = layout_name in INDEXED
            writer = IcebergWriter(
                catalog, "bench.orders", key_index_dir=Path(tmp) / "index" if indexed else None,
                compaction=CompactionPolicy() if indexed else None,
                keep_snapshots=StreamConfig().keep_snapshots if indexed else 0, background_upkeep=True,
            )  # fmt: skip
        for batch, changes in enumerate(work, 1):
            end = BinlogOffset("binlog.000001", int(changes.column("at")[-1].as_py()) & 0xFFFFFFFF)
            started = time.monotonic()
            if isinstance(writer, ChangelogWriter):
                logged = changelog_rows(changes, None, images, "binlog")
                filled = None if side == READING else SCHEMA.names
                writer.append_batch(batch, logged, end, filled=filled)
            else:
                upserts, deletes = _last_per_key(changes)
                writer.merge_batch(batch, upserts, deletes, offset=end)
            seconds.append(time.monotonic() - started)
        writer.settle()
        return {
            "side": side,
            "rows": table_rows,
            "seconds_per_batch": [round(s, 3) for s in seconds],
            "median_s": round(statistics.median(seconds[1:]), 3),  # the first builds indexes
        }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--changes", type=int, default=20_000)
    args = parser.parse_args()
    cache_immutable_files()  # as binlake's jobs start (spark/entry.py)
    started = time.monotonic()
    sides = ["changelog", "history", READING, *UPSERT_LAYOUTS]
    results = {(side, n): run(side, n, args) for side in sides for n in (args.rows, 4 * args.rows)}
    growth = {side: round(results[side, 4 * args.rows]["median_s"] / results[side, args.rows]["median_s"], 2)
              for side in sides}  # fmt: skip
    versus = {
        f"{kind} ÷ {side} @ {n}": round(results[kind, n]["median_s"] / results[side, n]["median_s"], 3)
        for kind in ("changelog", "history", READING)
        for side in UPSERT_LAYOUTS
        for n in (args.rows, 4 * args.rows)
    }
    print(
        json.dumps(
            {
                "benchmark": "changelog",
                "rows": args.rows,
                "batches": args.batches,
                "changes_per_batch": args.changes,
                "goals": {"changelog_cost_growth_4x": 1.1, "history_cost_growth_4x": 1.3},
                "cost_growth_4x": growth,
                "versus_upsert": versus,
                "results": list(results.values()),
                "seconds": round(time.monotonic() - started, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
