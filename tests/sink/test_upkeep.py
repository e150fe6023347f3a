"""A streamed table's upkeep in the background (``sink/upkeep.py``): a batch's compaction runs in
a thread of its own after the commit, the table's next commit waits for it, its error stops the
next batch before anything of it is written, and the table stays exact."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from binlake.offsets import BinlogOffset
from binlake.sink import compaction
from binlake.sink.upkeep import Upkeep
from binlake.sink.writer import IcebergWriter
from binlake.testing import duckdb_iceberg
from tests.sink.helpers import compacting_writer, compactions, content, fill, rows


def _batch(writer: IcebergWriter, batch: int, updated: list[int], deleted: list[int]) -> None:
    writer.merge_batch(
        batch,
        rows(sorted(updated), f"b{batch}-"),
        pa.table({"id": pa.array(deleted, pa.int64())}),
        BinlogOffset("mysql-bin.000001", 1000 + batch),
    )


def test_compactions_run_beside_the_stream_and_the_table_stays_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = compacting_writer(tmp_path, background_upkeep=True)
    expected = fill(writer, 3000)
    threads: list[str] = []
    overlapped: list[bool] = []
    gates: list[threading.Event] = []  # the k-th upkeep (after batch k + 1) waits for gate k
    after_batch = compaction.after_batch

    def slow_after_batch(*args: Any) -> bool:
        gate = gates[len(threads)]
        threads.append(threading.current_thread().name)
        gate.wait(10)  # held until the test has seen its batch return
        return after_batch(*args)

    monkeypatch.setattr(compaction, "after_batch", slow_after_batch)
    rng = random.Random(3)
    for batch in range(1, 25):
        touched = rng.sample(range(3100), 80)
        gates.append(threading.Event())
        _batch(writer, batch, touched[20:], touched[:20])
        # The batch is committed while its upkeep still waits: it did not run in the batch's time.
        overlapped.append(writer.upkeep._running is not None and not writer.upkeep._running.done())
        gates[-1].set()
        expected.update({k: f"b{batch}-{k}" for k in touched[20:]})
        for k in touched[:20]:
            expected.pop(k, None)
    writer.settle()
    assert all(overlapped)
    assert len(threads) == 24
    assert all(name.startswith("upkeep-") for name in threads)
    assert compactions(writer) > 0  # the background work did compact
    assert content(writer) == expected
    own = duckdb_iceberg.read(writer.table).to_pylist()
    assert {r["id"]: r["v"] for r in own} == expected
    assert writer.stream_offset() == BinlogOffset("mysql-bin.000001", 1024)


def test_an_upkeep_error_stops_the_next_batch_before_it_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = compacting_writer(tmp_path, background_upkeep=True)
    fill(writer, 100)

    def broken(*args: Any) -> bool:
        raise OSError("disk full")

    monkeypatch.setattr(compaction, "after_batch", broken)
    _batch(writer, 1, [1, 2], [3])  # committed; its upkeep fails in the background
    before = writer.table.current_snapshot()
    with pytest.raises(OSError, match="disk full"):
        _batch(writer, 2, [4], [5])
    writer.table.refresh()
    assert writer.table.current_snapshot() == before  # nothing of batch 2
    assert writer.stream_offset() == BinlogOffset("mysql-bin.000001", 1001)
    _batch(writer, 2, [4], [5])  # the error was reported once; the batch goes in on the retry
    assert writer.stream_offset() == BinlogOffset("mysql-bin.000001", 1002)


def test_inline_upkeep_runs_in_the_callers_time() -> None:
    upkeep, ran = Upkeep("t", background=False), []
    upkeep.start(lambda: ran.append(threading.current_thread().name))
    assert ran == [threading.current_thread().name]
    upkeep.settle()
    assert upkeep.waited == 0.0
