"""Exactly-once writes: replayed commits change nothing; racing writers end exact."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.table import Transaction

from binlake.offsets import BinlogOffset
from binlake.sink import copy_on_write
from binlake.sink.exactly_once import MAX_ATTEMPTS, ChunkCommit, CommitConflictError, PartialCommitError
from binlake.sink.keys.file_bounds import files_with_keys
from binlake.sink.writer import IcebergWriter
from tests.sink.helpers import COPY_ON_WRITE, content, create, make_catalog, rows


def parquet(tmp_path: Path, name: str, data: pa.Table) -> str:
    path = tmp_path / "staging" / name
    path.parent.mkdir(exist_ok=True)
    pq.write_table(data, path)
    return f"file://{path}"


HIGH = BinlogOffset("binlog.000007", 1234)


def test_append_files_once(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog))
    files = [
        parquet(tmp_path, "a.parquet", rows([1, 2], "a")),
        parquet(tmp_path, "b.parquet", rows([3], "b")),
    ]
    chunks = [ChunkCommit("t#0", HIGH, 2), ChunkCommit("t#1", BinlogOffset("binlog.000008", 4), 1)]
    first = writer.append_files(files, chunks)
    assert first.outcome == "committed"
    assert first.files_added == 2
    assert writer.committed_chunks() == {"t#0": HIGH, "t#1": BinlogOffset("binlog.000008", 4)}
    # A rerun after a crash between the commit and the state store: recognised, not added twice.
    again = IcebergWriter(catalog, "db.t").append_files(files, chunks)
    assert again.outcome == "skipped"
    assert content(writer) == {1: "a1", 2: "a2", 3: "b3"}
    with pytest.raises(PartialCommitError, match="t#1 of the group are committed already but t#2"):
        writer.append_files(
            [parquet(tmp_path, "c.parquet", rows([4], "c"))], [chunks[1], ChunkCommit("t#2", HIGH, 1)]
        )


def test_merge_batch_replaces_keys_and_is_skipped_on_replay(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog))
    writer.table.append(rows(list(range(1, 101)), "v"))
    expected = {i: f"v{i}" for i in range(1, 101)}

    upserts = rows([5, 50, 200], "u")
    deletes = pa.table({"id": pa.array([7, 8, 999], pa.int64())})
    assert writer.merge_batch(1, upserts, deletes).outcome == "committed"
    expected.update({5: "u5", 50: "u50", 200: "u200"})
    del expected[7], expected[8]
    assert content(writer) == expected
    assert writer.last_batch_id() == 1

    assert writer.merge_batch(1, rows([5], "replayed"), deletes).outcome == "skipped"
    assert writer.merge_batch(0, rows([6], "older"), None).outcome == "skipped"
    assert content(writer) == expected
    assert (
        writer.merge_batch(2, rows([], "x"), pa.table({"id": pa.array([1], pa.int64())})).outcome
        == "committed"
    )
    del expected[1]
    assert content(writer) == expected


def test_merge_rewrites_only_files_holding_the_keys(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, properties=COPY_ON_WRITE))
    for start in range(0, 4000, 1000):  # four sorted files, one per key range
        writer.table.append(rows(list(range(start, start + 1000)), "v"))
    total = sum(task.file.file_size_in_bytes for task in writer.table.scan().plan_files())
    result = writer.merge_batch(1, rows([3500, 3999, 4500], "u"), None)
    assert result.files_removed == 1  # only the file of 3000-3999
    assert result.bytes_removed < total / 3
    assert len(content(writer)) == 4001


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_a_commit_result_describes_the_snapshot_the_catalog_has(tmp_path: Path, mode: str) -> None:
    """The writer's table is not loaded again after a commit: what it reports must still be the
    commit the catalog holds, and the writer's next commit must start from it."""
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(
        catalog, create(catalog), key_index_dir=tmp_path / "index",
        compaction=None, keep_snapshots=0,
    )  # fmt: skip
    writer.table.transaction().set_properties({"write.merge.mode": mode}).commit_transaction()
    writer.table.append(rows(list(range(0, 1000)), "v"))
    for batch in (1, 2):
        result = writer.merge_batch(batch, rows([10 * batch, 2000 + batch], "u"), None)
        stored = catalog.load_table("db.t")
        snapshot = stored.current_snapshot()
        assert snapshot is not None
        assert snapshot.summary is not None
        assert result.snapshot_id == snapshot.snapshot_id == writer.table.current_snapshot().snapshot_id
        assert result.files_added == int(snapshot.summary["added-data-files"])
        assert result.bytes_added == int(snapshot.summary["added-files-size"])
        assert writer.table.metadata_location == stored.metadata_location
    assert content(writer) == {
        **{i: f"v{i}" for i in range(1000)},
        10: "u10",
        20: "u20",
        2001: "u2001",
        2002: "u2002",
    }


@pytest.mark.parametrize(("coalesce_bytes", "files"), [(0, 4 + 5), (64 * 1024 * 1024, 1)])
def test_upserts_go_into_the_files_they_belong_to(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, coalesce_bytes: int, files: int
) -> None:
    monkeypatch.setattr(copy_on_write, "COALESCE_BYTES", coalesce_bytes)
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, properties=COPY_ON_WRITE))
    for start in range(0, 4000, 1000):
        writer.table.append(rows(list(range(start, start + 1000)), "v"))
    expected = {i: f"v{i}" for i in range(4000)}
    for batch in range(1, 6):  # every batch updates keys in all four files and adds new ones
        keys = [10 + batch, 1500 + batch, 2500 + batch, 3999, 5000 + batch]
        writer.merge_batch(
            batch, rows(keys, f"b{batch}-"), pa.table({"id": pa.array([batch * 100], pa.int64())})
        )
        expected.update({k: f"b{batch}-{k}" for k in keys})
        expected.pop(batch * 100, None)
    assert content(writer) == expected
    # Without coalescing: four range files rewritten in place, plus one small file per batch for
    # the keys past the end. Coalesced (the default): the small pieces end in one file, in key order.
    tasks = list(writer.table.scan().plan_files())
    assert len(tasks) == files
    if files == 1:
        ids = writer.table.scan().to_arrow().column("id").to_pylist()
        assert ids == sorted(ids)


def test_composite_key_merge(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, key=("o", "line")))
    schema = pa.schema(
        [pa.field("o", pa.int64(), False), pa.field("line", pa.int64(), False), ("v", pa.string())]
    )
    writer.table.append(
        pa.table({"o": [1, 1, 2, 2], "line": [1, 2, 1, 2], "v": ["a", "b", "c", "d"]}, schema=schema)
    )
    upserts = pa.table({"o": [1, 3], "line": [2, 1], "v": ["B", "new"]}, schema=schema)
    deletes = pa.table({"o": pa.array([2], pa.int64()), "line": pa.array([1], pa.int64())})
    writer.merge_batch(1, upserts, deletes)
    got = {(r["o"], r["line"]): r["v"] for r in writer.table.scan().to_arrow().to_pylist()}
    assert got == {(1, 1): "a", (1, 2): "B", (2, 2): "d", (3, 1): "new"}


def test_two_writers_racing_on_one_batch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    catalog = make_catalog(tmp_path)
    identifier = create(catalog)
    IcebergWriter(catalog, identifier).table.append(rows(list(range(10)), "v"))
    barrier = threading.Barrier(2, timeout=30)
    original = Transaction.commit_transaction
    waited: set[int] = set()

    def commit_together(self: Transaction) -> Any:
        # Both writers build their commit on the same table version, then commit at once.
        if threading.get_ident() not in waited:
            waited.add(threading.get_ident())
            barrier.wait()
        return original(self)

    monkeypatch.setattr(Transaction, "commit_transaction", commit_together)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            writer = IcebergWriter(make_catalog(tmp_path), identifier)  # each its own catalog connection
            outcomes.append(
                writer.merge_batch(1, rows([3], "won"), pa.table({"id": pa.array([4], pa.int64())})).outcome
            )
        except BaseException as e:
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(outcomes) == ["committed", "skipped"]
    final = IcebergWriter(catalog, identifier)
    assert content(final) == {**{i: f"v{i}" for i in range(10) if i != 4}, 3: "won3"}
    assert len(final.table.snapshots()) == 2  # the initial append and one merge


def test_manifests_are_merged_once_batches_leave_many(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog), merge_manifests_at=8)
    expected: dict[int, str] = {}
    counts = []
    for batch in range(1, 21):
        keys = [batch * 10 + i for i in range(3)] + [batch * 10 - 9]  # new keys and one earlier one
        writer.merge_batch(batch, rows(keys, f"b{batch}-"), offset=BinlogOffset("b.000001", 1000 + batch))
        expected.update({k: f"b{batch}-{k}" for k in keys})
        writer.table.refresh()
        counts.append(len(writer.table.current_snapshot().manifests(writer.table.io)))  # type: ignore[union-attr]
        assert content(writer) == expected
    assert max(counts) < 8 + 2  # merged whenever a batch left 8 or more
    assert any(after < before for before, after in itertools.pairwise(counts))
    assert counts[-1] < counts[6] + 8
    # The stream's offset and replay protection are untouched by the merge commits.
    assert writer.stream_offset() == BinlogOffset("b.000001", 1020)
    assert (
        writer.merge_batch(20, rows([10], "replayed"), offset=BinlogOffset("b.000001", 1020)).outcome
        == "skipped"
    )
    assert content(writer) == expected
    # Never merged with 0.
    plain = IcebergWriter(catalog, create(catalog, "u"))
    for batch in range(1, 12):
        plain.merge_batch(batch, rows([batch], "x"), offset=BinlogOffset("b.000001", batch))
    plain.table.refresh()
    assert len(plain.table.current_snapshot().manifests(plain.table.io)) >= 11  # type: ignore[union-attr]


def test_copy_on_write_writes_each_file_in_key_order(tmp_path: Path) -> None:
    """Pieces in key order are written as they are; anything else is sorted first."""
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog))
    writer.table.append(rows(list(range(0, 1000, 2)), "v"))  # even keys
    batches = [
        rows(list(range(1000, 1100)), "n"),  # new keys, beyond the table's and in order
        rows([1101, 1099, 7, 3, 2000, 1], "u"),  # out of order, into the stored files
    ]
    for batch_id, upserts in enumerate(batches, start=1):
        assert writer.merge_batch(batch_id, upserts, None).outcome == "committed"
        for task in writer.table.scan().plan_files():
            ids = pq.read_table(task.file.file_path.removeprefix("file://")).column("id").to_pylist()
            assert ids == sorted(ids), task.file.file_path
    expected = {i: f"v{i}" for i in range(0, 1000, 2)} | {i: f"n{i}" for i in range(1000, 1100)}
    expected |= {i: f"u{i}" for i in (1101, 1099, 7, 3, 2000, 1)}
    assert content(writer) == expected


@pytest.mark.parametrize("key_type", ["bigint", "varchar"])
def test_files_with_keys_picks_the_files_whose_bounds_hold_a_key(tmp_path: Path, key_type: str) -> None:
    catalog = make_catalog(tmp_path)
    identifier = create(catalog)
    table = catalog.load_table(identifier)
    for start in range(0, 4000, 1000):  # four files, one per key range
        table.append(rows(list(range(start, start + 1000)), "v"))
    keys = {  # keys of the second and the last file, a NULL, a repeated key, one past every file
        "bigint": pa.table({"id": pa.array([3999, None, 1500, 1500, 99_999], pa.int64())}),
        "varchar": pa.table({"v": pa.array(["v3999", "v1500", None, "zz"])}),
    }[key_type]
    column = keys.column_names[0]
    picked = files_with_keys(table, keys, [column])
    held = sorted(
        pq.read_table(t.file.file_path.removeprefix("file://")).column("id")[0].as_py() for t, _, _ in picked
    )
    # Text compares as text: the first file's bounds are "v0" and "v999", so "v1500" and "v3999"
    # may be in it too; "zz" is past every file's upper bound.
    assert held == ([1000, 3000] if key_type == "bigint" else [0, 1000, 3000])


def test_a_commit_that_meets_another_writers_commit_checks_again_and_retries(tmp_path: Path) -> None:
    """Real conflicts: another catalog commits to the table just before each of binlake's first two
    commits, so the catalog refuses them (pyiceberg's CommitFailedException); binlake refreshes,
    checks the batch is not in already, waits a jittered moment and commits on the new base."""
    catalog = make_catalog(tmp_path)
    identifier = create(catalog)
    writer = IcebergWriter(catalog, identifier)
    other = make_catalog(tmp_path).load_table(identifier)  # another process's view of the table
    commit, conflicts = catalog.commit_table, []

    def after_another_writer(table: Any, requirements: Any, updates: Any) -> Any:
        if len(conflicts) < 2:
            conflicts.append(len(conflicts))
            other.refresh()
            other.append(rows([1000 + len(conflicts)], "other"))
        return commit(table, requirements, updates)

    catalog.commit_table = after_another_writer  # type: ignore[method-assign]
    result = writer.merge_batch(1, rows([1, 2], "a"), offset=BinlogOffset("b.000001", 10))
    assert (result.outcome, result.attempts) == ("committed", 3)
    assert content(writer) == {1: "a1", 2: "a2", 1001: "other1001", 1002: "other1002"}


def test_conflicts_on_every_attempt_stop_with_binlakes_error(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    identifier = create(catalog)
    writer = IcebergWriter(catalog, identifier)
    other = make_catalog(tmp_path).load_table(identifier)
    commit, seen = catalog.commit_table, []

    def always_after_another_writer(table: Any, requirements: Any, updates: Any) -> Any:
        seen.append(1)
        other.refresh()
        other.append(rows([2000 + len(seen)], "other"))
        return commit(table, requirements, updates)

    catalog.commit_table = always_after_another_writer  # type: ignore[method-assign]
    with pytest.raises(CommitConflictError, match=f"batch 1 to {identifier}: {MAX_ATTEMPTS} conflicts"):
        writer.merge_batch(1, rows([1], "a"), offset=BinlogOffset("b.000001", 10))
    assert len(seen) == MAX_ATTEMPTS
