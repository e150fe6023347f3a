"""Compaction inside the stream: a merge-on-read table's data files and delete files stay bounded
over many batches, the table stays exact (for pyiceberg and DuckDB's own reader), the key index
follows the rows it moves, and the stream's exactly-once record survives it."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask

from binlake.config.layout import parse_partition_term
from binlake.offsets import BinlogOffset
from binlake.sink.compaction import CATCH_UP_SLACK, CompactionPolicy
from binlake.sink.partition_files import Partitioning
from binlake.sink.writer import IcebergWriter
from binlake.testing import duckdb_iceberg
from tests.sink.helpers import (
    POLICY,
    SMALL_FILES_MOR,
    compacting_writer,
    compactions,
    content,
    create,
    fill,
    make_catalog,
    rows,
)


def _counts(writer: IcebergWriter) -> tuple[int, int]:
    writer.table.refresh()
    tasks = list(writer.table.scan().plan_files())
    return len(tasks), len({d.file_path for t in tasks for d in t.delete_files})


def _manifests(writer: IcebergWriter) -> int:
    snapshot = writer.table.current_snapshot()
    return len(snapshot.manifests(writer.table.io)) if snapshot is not None else 0


def test_files_and_delete_files_stay_bounded_and_the_table_exact(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = compacting_writer(tmp_path)
    expected = fill(writer, 4000)
    initial = _counts(writer)[0]
    rng = random.Random(7)
    con = duckdb_iceberg.connect()
    peak, manifests = (0, 0), 0
    with caplog.at_level(logging.INFO, logger="binlake.sink.compaction"):
        for batch in range(1, 41):
            touched = rng.sample(range(4200), 100)  # uniform: every file loses rows
            deleted, updated = touched[:20], touched[20:]
            writer.merge_batch(
                batch,
                rows(sorted(updated), f"b{batch}-"),
                pa.table({"id": pa.array(deleted, pa.int64())}),
                BinlogOffset("mysql-bin.000001", 1000 + batch),
            )
            expected.update({k: f"b{batch}-{k}" for k in updated})
            for k in deleted:
                expected.pop(k, None)
            assert content(writer) == expected, f"batch {batch}"
            if batch % 8 == 0:
                own = duckdb_iceberg.read(writer.table, con).to_pylist()
                assert len(own) == len(expected)
                assert {r["id"]: r["v"] for r in own} == expected
            peak = max(peak, _counts(writer))
            manifests = max(manifests, _manifests(writer))
    assert "compacted db.t" in caplog.text
    assert compactions(writer) >= 3
    # Bounded: without compaction 40 batches leave 40 more data files and 40 delete files.
    data_files, delete_files = peak
    assert data_files <= initial + POLICY.small_files + 2
    assert delete_files <= POLICY.delete_files + 1
    # So are the manifests: a compaction merges them (without, they pile up: 30 here).
    assert manifests <= 2 * POLICY.small_files + 4
    # The index followed every move: it describes the table and counts its live rows exactly.
    index = writer._key_index
    assert index is not None
    assert index.describes(writer.table)
    assert sum(index.live_rows().values()) == len(expected)
    # The stream's record survives the compactions: a replayed batch is skipped.
    replay = writer.merge_batch(40, rows([1], "again-"), None, BinlogOffset("mysql-bin.000001", 1040))
    assert replay.outcome == "skipped"


def test_small_files_are_merged_with_those_of_their_size_not_with_a_big_one(tmp_path: Path) -> None:
    """A table whose one file is "small" (under a quarter of the target size, as a young table's
    is) is not rewritten each time the batches' files are merged: those are merged among
    themselves, by size, and the files stay bounded."""
    catalog = make_catalog(tmp_path)
    identifier = create(catalog, properties={"write.merge.mode": "merge-on-read"})
    writer = IcebergWriter(catalog, identifier, key_index_dir=tmp_path / "index", compaction=POLICY)
    writer.table.append(rows(list(range(3000)), "v"))
    (big,) = [t.file.file_path for t in writer.table.scan().plan_files()]
    expected = {i: f"v{i}" for i in range(3000)}
    rng = random.Random(3)
    for batch in range(1, 41):
        updated = [*sorted(rng.sample(range(3000), 5)), 5000 + batch]
        writer.merge_batch(batch, rows(updated, f"b{batch}-"), None)
        expected.update({k: f"b{batch}-{k}" for k in updated})
        files = [t.file.file_path for t in writer.table.scan().plan_files()]
        assert big in files, f"batch {batch}: the big file was rewritten"
        assert len(files) <= 1 + POLICY.small_files, f"batch {batch}: {len(files)} files"
    assert compactions(writer) >= 5
    assert content(writer) == expected


def test_a_compactions_files_are_target_sized_on_disk_not_small_again_at_once(tmp_path: Path) -> None:
    """pyiceberg cuts files at the target size of their rows in memory, several times their size
    on disk (these rows compress well): a compaction's files cut so are small again at once, and
    the next compaction rewrites them with every new batch's file, while the files pile up. Cut at
    the target on disk, a compaction's files are done, and compactions follow the batches."""
    writer = compacting_writer(tmp_path)
    target = int(writer.table.properties["write.target-file-size-bytes"])
    expected: dict[int, str] = {}
    batches = 30
    for batch in range(1, batches + 1):
        ids = list(range(batch * 1000, batch * 1000 + 60))
        tag = f"b{batch}-" + "x" * 120
        writer.merge_batch(batch, rows(ids, tag), None)
        expected.update({i: f"{tag}{i}" for i in ids})
    writer.settle()
    sizes = [t.file.file_size_in_bytes for t in writer.table.scan().plan_files()]
    assert len([s for s in sizes if s < target // 4]) < POLICY.small_files, sizes
    # Each compaction takes the small files of at least small_files - 1 batches.
    assert 1 <= compactions(writer) <= batches // (POLICY.small_files - 1) + 1
    assert content(writer) == expected


def test_a_stream_catching_up_compacts_at_a_larger_debt_still_bounded_then_pays_it(tmp_path: Path) -> None:
    """While the stream is a batch or more behind, compaction waits for CATCH_UP_SLACK times more
    small files (a catch-up's batches keep coming: compacting between them rewrote the table
    again and again); the files stay bounded, and the first batch after the catch-up compacts."""
    writer = compacting_writer(tmp_path)
    relaxed = POLICY.catching_up()
    assert relaxed.small_files == POLICY.small_files * CATCH_UP_SLACK
    assert (relaxed.deleted_share, relaxed.delete_files) == (0.75, POLICY.delete_files * CATCH_UP_SLACK)
    expected: dict[int, str] = {}

    def batch(n: int) -> None:
        ids = list(range(n * 100, n * 100 + 20))
        writer.merge_batch(n, rows(ids, f"b{n}-"), None)
        expected.update({i: f"b{n}-{i}" for i in ids})

    writer.catching_up = True
    for n in range(1, relaxed.small_files):
        batch(n)
    writer.settle()
    assert compactions(writer) == 0  # the usual policy compacts after POLICY.small_files batches
    assert _counts(writer)[0] == relaxed.small_files - 1
    for n in range(relaxed.small_files, relaxed.small_files + 3):
        batch(n)
        writer.settle()
        assert _counts(writer)[0] < relaxed.small_files, "bounded while catching up too"
    assert compactions(writer) == 1
    writer.catching_up = False
    batch(relaxed.small_files + 3)
    batch(relaxed.small_files + 4)
    writer.settle()
    assert _counts(writer)[0] < POLICY.small_files
    assert content(writer) == expected


def test_no_compaction_without_a_policy(tmp_path: Path) -> None:
    writer = compacting_writer(tmp_path, policy=None)
    writer.table.append(rows(list(range(1000)), "v"))
    initial = _counts(writer)[0]
    for batch in range(1, 7):
        writer.merge_batch(batch, rows([batch, 500 + batch], f"b{batch}-"), None)
    assert compactions(writer) == 0
    assert _counts(writer) == (initial + 6, 6)


def test_merge_on_read_manifests_are_merged_without_compaction(tmp_path: Path) -> None:
    """Without compaction, ``merge_manifests_at`` bounds a merge-on-read table's manifests (data
    and deletes) as a copy-on-write table's; the merged deletes still apply to the rows they did
    (sequence numbers kept), for pyiceberg and DuckDB."""
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, properties=SMALL_FILES_MOR), merge_manifests_at=6)
    expected = fill(writer, 1000)
    most = 0
    for batch in range(1, 21):
        updated, deleted = [batch, 300 + batch, 2000 + batch], [600 + batch]
        deletes = pa.table({"id": pa.array(deleted, pa.int64())})
        writer.merge_batch(batch, rows(updated, f"b{batch}-"), deletes)
        expected.update({k: f"b{batch}-{k}" for k in updated})
        expected.pop(600 + batch)
        most = max(most, _manifests(writer))
        assert content(writer) == expected, f"batch {batch}"
    assert most <= 6
    assert _counts(writer)[1] == 20  # delete files are left alone: only their manifests merged
    own = duckdb_iceberg.read(writer.table, duckdb_iceberg.connect()).to_pylist()
    assert {r["id"]: r["v"] for r in own} == expected


_CRASHING_WRITER = """
import sys
import pyarrow as pa
from pathlib import Path
from pyiceberg.catalog.sql import SqlCatalog
from binlake.offsets import BinlogOffset
from binlake.sink.compaction import CATCH_UP_SLACK, CompactionPolicy
from binlake.sink.writer import IcebergWriter
from tests.sink.helpers import rows

tmp = Path(sys.argv[1])
catalog = SqlCatalog("test", uri=f"sqlite:///{tmp / 'catalog.db'}", warehouse=f"file://{tmp / 'warehouse'}")
policy = CompactionPolicy(small_files=2, delete_files=0)
background = sys.argv[2] == "background"  # as the stream's writers: the upkeep in its own thread
writer = IcebergWriter(
    catalog, "db.t", key_index_dir=tmp / "index", compaction=policy, background_upkeep=background
)
writer.merge_batch(
    1, rows([5, 6, 2000], "one-"), pa.table({"id": pa.array([7], pa.int64())}), BinlogOffset("b.000001", 10)
)
writer.settle()  # the stream settles every writer before it ends
"""


@pytest.mark.parametrize("upkeep", ["inline", "background"])
@pytest.mark.parametrize("point", ["compaction-written", "compaction-committed"])
def test_kill_9_during_a_compaction_then_the_stream_goes_on_exact(
    point: str, upkeep: str, tmp_path: Path
) -> None:
    """Killed with the compaction's files written but not committed, or committed before the key
    index learned of it: the replayed batch is skipped, the next ones land exactly."""
    import os
    import signal
    import subprocess
    import sys

    from binlake.faults import VARIABLE

    writer = compacting_writer(tmp_path, policy=CompactionPolicy(small_files=2, delete_files=0))
    writer.table.append(rows(list(range(1000)), "v"))
    killed = subprocess.run(
        [sys.executable, "-c", _CRASHING_WRITER, str(tmp_path), upkeep],
        env={**os.environ, VARIABLE: point},
        capture_output=True,
        text=True,
        check=False,
        start_new_session=True,  # the crash point kills its whole process group
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    writer.table.refresh()
    assert compactions(writer) == (1 if point == "compaction-committed" else 0)
    expected = {i: f"v{i}" for i in range(1000) if i != 7} | {5: "one-5", 6: "one-6", 2000: "one-2000"}
    assert content(writer) == expected
    again = writer.merge_batch(1, rows([5], "replayed-"), None, BinlogOffset("b.000001", 10))
    assert again.outcome == "skipped"
    writer.merge_batch(
        2,
        rows([6, 8, 2000], "two-"),
        pa.table({"id": pa.array([5], pa.int64())}),
        BinlogOffset("b.000001", 20),
    )
    del expected[5]
    expected |= {6: "two-6", 8: "two-8", 2000: "two-2000"}
    assert content(writer) == expected
    own = duckdb_iceberg.read(writer.table).to_pylist()
    assert {r["id"]: r["v"] for r in own} == expected
    assert len(own) == len(expected)


def test_a_partitioned_table_compacts_every_partition_into_files_of_its_own(tmp_path: Path) -> None:
    """Small files in every partition, rewritten in one compaction: each new file holds rows of one
    partition only, as its manifest entry says."""
    catalog = make_catalog(tmp_path)
    identifier = create(
        catalog, properties=SMALL_FILES_MOR, partition_by=(parse_partition_term("bucket(4, id)"),)
    )
    writer = IcebergWriter(catalog, identifier, key_index_dir=tmp_path / "index", compaction=POLICY)
    expected = fill(writer, 2000)
    for batch in range(1, 2 * POLICY.small_files + 1):
        touched = list(range(batch * 7, 2000, 97))  # every bucket, every batch
        writer.merge_batch(batch, rows(touched, f"b{batch}-"), pa.table({"id": pa.array([], pa.int64())}),
                           BinlogOffset("mysql-bin.000001", 1000 + batch))  # fmt: skip
        expected.update({k: f"b{batch}-{k}" for k in touched})
    assert compactions(writer) >= 1
    assert content(writer) == expected
    writer.table.refresh()
    partitioning = Partitioning.of(writer.table.metadata)
    assert partitioning is not None
    tasks = list(writer.table.scan().plan_files())
    assert len({repr(t.file.partition) for t in tasks}) == 4
    for task in tasks:
        stored = ArrowScan(writer.table.metadata, writer.table.io, writer.table.schema(), AlwaysTrue())
        data = stored.to_table(tasks=[FileScanTask(task.file)])
        assert partitioning.partition(data) == task.file.partition
