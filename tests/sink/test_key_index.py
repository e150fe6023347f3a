"""The key index of merge-on-read tables: the same table as without it, rebuilt whenever it does not
describe the table's current snapshot, and never trusted over the table."""

from __future__ import annotations

import logging
import random
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog

from binlake.events import Column, CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.sink.keys import key_index_store, run_index
from binlake.sink.keys.key_index import KeyIndex
from binlake.sink.keys.row_match import ClearRange
from binlake.sink.keys.table_keys import KeyIndexError
from binlake.sink.layout import TableLayout
from binlake.sink.metadata_applier import IcebergMetadataApplier
from binlake.sink.writer import IcebergWriter
from tests.sink.helpers import content, create, make_catalog, rows

MOR = {"write.merge.mode": "merge-on-read"}


def _batch(writer: IcebergWriter, batch: int, rng: random.Random, expected: dict[int, str]) -> None:
    touched = rng.sample(range(3500), 80)
    deleted, updated = touched[:15], touched[15:]
    writer.merge_batch(
        batch, rows(sorted(updated), f"b{batch}-"), pa.table({"id": pa.array(deleted, pa.int64())})
    )
    expected.update({k: f"b{batch}-{k}" for k in updated})
    for k in deleted:
        expected.pop(k, None)


def _loaded(writer: IcebergWriter) -> dict[int, str]:
    for start in range(0, 3000, 1000):
        writer.table.append(rows(list(range(start, start + 1000)), "v"))
    return {i: f"v{i}" for i in range(3000)}


def _built(writer: IcebergWriter, folder: Path) -> KeyIndex:
    """The index a build from the writer's table gives (in ``folder``)."""
    assert writer._key_index is not None
    built = KeyIndex(folder, writer._key_index.key_columns)
    built.rebuild(writer.table)
    return built


def _after_one_batch(tmp_path: Path) -> tuple[SqlCatalog, IcebergWriter, Path]:
    """A merge-on-read table of ten rows, one batch merged through its index; the index's folder."""
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, properties=MOR), key_index_dir=tmp_path / "index")
    writer.table.append(rows(list(range(10)), "v"))
    writer.merge_batch(1, rows([1], "a-"), None)
    assert writer._key_index is not None
    return catalog, writer, writer._key_index.path


@pytest.mark.parametrize("min_delta", [run_index._MIN_DELTA, 0])
def test_batches_through_the_index_give_the_table_a_scan_gives(
    tmp_path: Path, min_delta: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Also with the delta merged into a new base whenever it holds an eighth of the base's keys."""
    monkeypatch.setattr(run_index, "_MIN_DELTA", min_delta)
    catalog = make_catalog(tmp_path)
    indexed = IcebergWriter(catalog, create(catalog, "a", properties=MOR), key_index_dir=tmp_path / "index")
    scanned = IcebergWriter(catalog, create(catalog, "b", properties=MOR))
    expected = _loaded(indexed)
    _loaded(scanned)
    rng_a, rng_b = random.Random(3), random.Random(3)
    for batch in range(1, 9):
        _batch(indexed, batch, rng_a, expected)
        _batch(scanned, batch, rng_b, {})
        assert indexed._key_index is not None
        assert indexed._key_index.describes(indexed.table)
        # What the batches left in the index is what a build from the table finds.
        built = _built(indexed, tmp_path / f"built-{batch}")
        assert indexed._key_index.records() == built.records()
        live = {p: n for p, n in indexed._key_index.live_rows().items() if n}
        assert live == {p: n for p, n in built.live_rows().items() if n}
    assert content(indexed) == content(scanned) == expected
    summary = indexed.table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None
    assert int(summary.additional_properties["added-position-deletes"]) > 0


def test_an_index_that_missed_a_commit_is_rebuilt_from_the_table(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Another writer (or a crash between the commit and the index's update) moves the table on:
    the index no longer describes it and is rebuilt, skipping rows position deletes removed."""
    catalog = make_catalog(tmp_path)
    identifier = create(catalog, properties=MOR)
    first = IcebergWriter(catalog, identifier, key_index_dir=tmp_path / "index")
    expected = _loaded(first)
    rng = random.Random(11)
    _batch(first, 1, rng, expected)
    other = IcebergWriter(catalog, identifier)  # no index: it writes position deletes the index misses
    keys = sorted(expected)[:50]
    other.merge_batch(2, rows(keys, "other-"), None)
    expected.update({k: f"other-{k}" for k in keys})
    with caplog.at_level(logging.INFO, logger="binlake.sink.keys.key_index"):
        first.merge_batch(3, rows(keys[:10], "again-"), pa.table({"id": pa.array(keys[10:20], pa.int64())}))
    assert "indexed the keys" in caplog.text
    expected.update({k: f"again-{k}" for k in keys[:10]})
    for k in keys[10:20]:
        expected.pop(k)
    assert content(first) == expected

    # A new writer (a new job) finds the index describing the table: no rebuild.
    caplog.clear()
    later = IcebergWriter(catalog, identifier, key_index_dir=tmp_path / "index")
    with caplog.at_level(logging.INFO, logger="binlake.sink.keys.key_index"):
        _batch(later, 4, rng, expected)
    assert "indexed the keys" not in caplog.text
    assert content(later) == expected


def test_composite_keys_through_the_index(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(
        catalog, create(catalog, key=("o", "line"), properties=MOR), key_index_dir=tmp_path
    )
    schema = pa.schema(
        [pa.field("o", pa.int64(), False), pa.field("line", pa.int64(), False), ("v", pa.string())]
    )
    writer.table.append(
        pa.table({"o": [1, 1, 2, 2], "line": [1, 2, 1, 2], "v": ["a", "b", "c", "d"]}, schema=schema)
    )
    writer.merge_batch(
        1,
        pa.table({"o": [1, 3], "line": [2, 1], "v": ["B", "new"]}, schema=schema),
        pa.table({"o": pa.array([2], pa.int64()), "line": pa.array([1], pa.int64())}),
    )
    writer.merge_batch(2, pa.table({"o": [1], "line": [2], "v": ["BB"]}, schema=schema), None)
    got = {(r["o"], r["line"]): r["v"] for r in writer.table.scan().to_arrow().to_pylist()}
    assert got == {(1, 1): "a", (1, 2): "BB", (2, 2): "d", (3, 1): "new"}


def test_a_key_stored_twice_is_merged_without_the_index_until_a_backfill(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A key in two live rows (written by something else than binlake): positions picked for one
    of them would leave the other, so the build refuses to choose, says so, and the table's batches
    find their keys' rows by scanning — every row of a key they change goes — instead of stopping
    the stream; a backfill's ranges (which replace what they cover) let the index be built again."""
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, properties=MOR), key_index_dir=tmp_path / "index")
    writer.table.append(rows([1, 2, 3, 4], "v"))
    writer.table.append(rows([3], "w"))
    with caplog.at_level(logging.WARNING, logger="binlake.sink.keys.key_index"):
        writer.merge_batch(1, rows([2], "u"), None)
        writer.merge_batch(2, rows([1], "u"), None)
    warned = [r.getMessage() for r in caplog.records if "two live rows" in r.getMessage()]
    assert len(warned) == 1, warned  # tried once, not at every batch (a build reads the table)
    assert "db.t" in warned[0]
    assert "merged without the key index" in warned[0]
    stored = sorted((r["id"], r["v"]) for r in writer.table.scan().to_arrow().to_pylist())
    assert stored == [(1, "u1"), (2, "u2"), (3, "v3"), (3, "w3"), (4, "v4")]  # not binlake's to choose
    writer.merge_batch(3, rows([3], "u"), None)  # both rows of the key go
    assert content(writer) == {1: "u1", 2: "u2", 3: "u3", 4: "v4"}
    assert len(writer.table.scan().to_arrow()) == 4
    assert writer._key_index is not None
    assert not writer._key_index.describes(writer.table)
    writer.merge_batch(4, rows([3, 4], "b"), None, clear=[ClearRange("id", 3, 5)])  # a backfill's range
    writer.merge_batch(5, rows([4], "x"), None)
    assert writer._key_index.describes(writer.table)  # built again, and used
    assert content(writer) == {1: "u1", 2: "u2", 3: "b3", 4: "x4"}


def test_a_batch_that_would_store_a_key_twice_stops_naming_the_batch_and_its_offset(tmp_path: Path) -> None:
    """The guard behind the stream's compaction (one change per key and batch): new rows with the
    same key are found as the index takes the batch in, and the stream stops, saying which batch
    and where in the binlog — the fix is the table's, the position is where to look."""
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, properties=MOR), key_index_dir=tmp_path / "index")
    writer.table.append(rows([1, 2, 3], "v"))
    writer.merge_batch(1, rows([2], "u"), None, offset=BinlogOffset("binlog.000001", 400))
    twice = pa.concat_tables([rows([5], "a"), rows([5], "b")])
    with pytest.raises(KeyIndexError) as raised:
        writer.merge_batch(2, twice, None, offset=BinlogOffset("binlog.000001", 900))
    said = str(raised.value)
    assert "a key is in two live rows" in said
    assert "Fix: re-snapshot the table" in said
    assert said.endswith("(Found while applying batch 2, which ends at binlog offset binlog.000001:900.)")


def test_the_index_describes_one_table_and_snapshot(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, properties=MOR))
    writer.table.append(rows([1, 2], "v"))
    (tmp_path / "i.sqlite").write_bytes(b"an index of the format before")
    index = KeyIndex(tmp_path / "i", ["id"])
    assert not (tmp_path / "i.sqlite").exists()  # no longer read: removed
    assert not index.describes(writer.table)
    index.rebuild(writer.table)
    assert index.describes(writer.table)
    assert index.positions(pa.table({"id": pa.array([2, 9], pa.int64())})) == {
        writer.table.scan().plan_files()[0].file.file_path: [1]
    }
    writer.table.append(rows([3], "v"))
    writer.table.refresh()
    assert not index.describes(writer.table)
    catalog.drop_table("db.t")
    other = IcebergWriter(catalog, create(catalog, properties=MOR))
    assert not index.describes(other.table)


_KILLED = """
import os, sys
import pyarrow as pa
from pathlib import Path
from pyiceberg.catalog.sql import SqlCatalog
from binlake.sink.keys import key_index, key_index_store, run_index
from binlake.sink.writer import IcebergWriter
from tests.sink.helpers import rows

tmp, where = Path(sys.argv[1]), sys.argv[2]
catalog = SqlCatalog("test", uri=f"sqlite:///{tmp / 'catalog.db'}", warehouse=f"file://{tmp / 'warehouse'}")
writer = IcebergWriter(catalog, "db.t", key_index_dir=tmp / "index")
append, write_base = key_index_store.append, key_index.KeyIndex._write_base

def torn(path, record):  # dies half way through writing a record
    append(path, record[: len(record) // 2])
    os._exit(9)

def merging(self, run, identity):  # the first base is the build's; the second merges the delta
    if self._generation > 0:
        (self.path / f"base-{self._generation + 1}.tmp").mkdir()
        os._exit(9)
    return write_base(self, run, identity)

if where == "log":
    key_index_store.append = torn
else:
    run_index._MIN_DELTA = 0
    key_index.KeyIndex._write_base = merging
writer.merge_batch(1, rows([5, 6], "killed-"), pa.table({"id": pa.array([7], pa.int64())}))
"""


def _killed(tmp_path: Path, where: str) -> tuple[IcebergWriter, KeyIndex]:
    """A process that merged a batch into a new table of 20 rows, killed at ``where``; a new writer
    of the table and its index as that finds it."""
    import subprocess
    import sys

    catalog = make_catalog(tmp_path)
    identifier = create(catalog, properties=MOR)
    IcebergWriter(catalog, identifier).table.append(rows(list(range(20)), "v"))
    died = subprocess.run(
        [sys.executable, "-c", _KILLED, str(tmp_path), where], capture_output=True, text=True, check=False
    )
    assert died.returncode == 9, died.stderr
    writer = IcebergWriter(catalog, identifier, key_index_dir=tmp_path / "index")
    return writer, KeyIndex(tmp_path / "index" / f"{identifier}-{writer.table.metadata.table_uuid}", ["id"])


def test_a_process_killed_while_logging_a_batch_leaves_the_index_to_be_rebuilt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The Iceberg commit landed and the process died while writing the batch's log record: the
    next writer must not trust the index (it rebuilds, and the next batch replaces the right rows)."""
    writer, index = _killed(tmp_path, "log")
    assert not index.describes(writer.table)
    with caplog.at_level(logging.INFO, logger="binlake.sink.keys.key_index"):
        writer.merge_batch(2, rows([6, 8], "after-"), pa.table({"id": pa.array([5], pa.int64())}))
    assert "indexed the keys" in caplog.text
    expected = {i: f"v{i}" for i in range(20) if i not in (5, 7)} | {6: "after-6", 8: "after-8"}
    assert content(writer) == expected


def test_a_process_killed_while_writing_a_new_base_keeps_the_logged_index(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The batch's record reached the log and the process died merging the delta into a new base:
    the old base and its log still describe the table (no rebuild)."""
    writer, index = _killed(tmp_path, "base")
    assert index.describes(writer.table)
    with caplog.at_level(logging.INFO, logger="binlake.sink.keys.key_index"):
        writer.merge_batch(2, rows([6, 8], "after-"), pa.table({"id": pa.array([5], pa.int64())}))
    assert "indexed the keys" not in caplog.text
    expected = {i: f"v{i}" for i in range(20) if i not in (5, 7)} | {6: "after-6", 8: "after-8"}
    assert content(writer) == expected
    built = _built(writer, tmp_path / "built")
    assert writer._key_index is not None
    assert writer._key_index.records() == built.records()


def test_log_records_of_another_boot_are_not_trusted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The log is not synced: after a machine crash its pages may be lost, so a new boot replays
    none of the records the last one wrote."""
    _, writer, path = _after_one_batch(tmp_path)
    assert KeyIndex(path, ["id"]).describes(writer.table)
    monkeypatch.setattr(key_index_store, "boot", lambda: "another boot")
    assert not KeyIndex(path, ["id"]).describes(writer.table)


@pytest.mark.parametrize("damaged", ["base-1/keys.npy", "base-1/meta.json", "base-1.log"])
def test_a_damaged_index_file_is_rebuilt(tmp_path: Path, damaged: str) -> None:
    catalog, writer, path = _after_one_batch(tmp_path)
    (path / damaged).write_bytes(b"not an index" * 100)
    assert not KeyIndex(path, ["id"]).describes(writer.table)
    later = IcebergWriter(catalog, writer.identifier, key_index_dir=tmp_path / "index")
    later.merge_batch(2, rows([1, 2], "b-"), pa.table({"id": pa.array([3], pa.int64())}))
    assert content(later) == {i: f"v{i}" for i in range(10) if i != 3} | {1: "b-1", 2: "b-2"}


@pytest.mark.parametrize("kind", ["varchar", "composite"])
def test_keys_kept_as_bytes_or_digests_give_the_index_a_build_gives(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Keys of several integer columns are kept as their bytes, others as digests; batches through
    either leave the index a build from the table finds, with the delta merged into new bases."""
    monkeypatch.setattr(run_index, "_MIN_DELTA", 0)
    catalog = make_catalog(tmp_path)
    key = ("o", "line") if kind == "composite" else ("code",)
    columns = [Column(k, kind if kind == "varchar" else "bigint", kind, nullable=False) for k in key]
    applier = IcebergMetadataApplier(catalog, lambda t: (t.database, t.table), TableLayout(properties=MOR))
    applier.apply(CreateTable(TableId("db", "t"), (*columns, Column("v", "bigint", "bigint")), key))
    writer = IcebergWriter(catalog, "db.t", key_index_dir=tmp_path / "index")
    schema = writer.table.schema().as_arrow()

    def batch(ids: list[int], v: int) -> pa.Table:
        values = {"o": [i // 7 - 50 for i in ids], "line": [i % 7 for i in ids]} if kind == "composite" else {
            "code": [f"k{i:05}" for i in ids]
        }  # fmt: skip
        return pa.table({**values, "v": [v] * len(ids)}, schema=schema)

    writer.table.append(batch(list(range(700)), 0))
    expected = {i: 0 for i in range(700)}
    rng = random.Random(5)
    for n in range(1, 7):
        touched = rng.sample(range(900), 60)
        writer.merge_batch(n, batch(sorted(touched[10:]), n), batch(sorted(touched[:10]), n).select(key))
        expected.update({i: n for i in touched[10:]})
        for i in touched[:10]:
            expected.pop(i, None)
        built = _built(writer, tmp_path / f"built-{n}")
        assert writer._key_index is not None
        assert writer._key_index.records() == built.records()
    assert sorted(writer.table.scan().to_arrow().column("v").to_pylist()) == sorted(expected.values())
    assert writer.table.scan().to_arrow().num_rows == len(expected)


def test_distinct_keys_are_np_unique_of_every_key_encoding() -> None:
    """``distinct`` is ``np.unique`` by a sort (numpy's own hashes first, 25× slower on a batch)."""
    rng = np.random.default_rng(7)
    ints = rng.integers(-(2**62), 2**62, 5000).astype(np.int64)
    cases = [
        np.concatenate([ints, ints[:1000]]),  # repeated keys
        np.frombuffer(rng.bytes(16 * 3000), "S16"),  # digests
        np.frombuffer(rng.integers(0, 3, 24 * 500).astype(np.uint8).tobytes(), "S24"),  # few distinct
        np.array([5, 5, 5], np.int64),
        np.array([3], np.int64),
        np.empty(0, np.int64),
        np.empty(0, "S16"),
    ]
    for keys in cases:
        found = key_index_store.distinct(keys)
        assert found.dtype == keys.dtype
        assert np.array_equal(found, np.unique(keys)), keys.dtype
