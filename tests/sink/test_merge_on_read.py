"""Merge-on-read: position-delete files instead of rewrites, the same table, and maintain folds them in."""

from __future__ import annotations

import datetime as dt
import random
from pathlib import Path

import pyarrow as pa
import pytest

from binlake.sink.maintenance import MaintenanceOptions, maintain
from binlake.sink.writer import IcebergWriter
from binlake.state.store import StateStore
from binlake.testing import duckdb_iceberg
from tests.sink.helpers import content, create, make_catalog, rows

MOR = {"write.merge.mode": "merge-on-read"}


def apply_batches(writer: IcebergWriter, seed: int) -> dict[int, str]:
    """Random upserts and deletes over sorted files; returns the expected table."""
    rng = random.Random(seed)
    for start in range(0, 3000, 1000):
        writer.table.append(rows(list(range(start, start + 1000)), "v"))
    expected = {i: f"v{i}" for i in range(3000)}
    for batch in range(1, 8):
        touched = rng.sample(range(3500), 60)
        deleted, updated = touched[:10], touched[10:]
        writer.merge_batch(
            batch, rows(sorted(updated), f"b{batch}-"), pa.table({"id": pa.array(deleted, pa.int64())})
        )
        expected.update({k: f"b{batch}-{k}" for k in updated})
        for k in deleted:
            expected.pop(k, None)
    return expected


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_both_modes_give_the_same_table(tmp_path: Path, mode: str) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, properties={"write.merge.mode": mode}))
    expected = apply_batches(writer, seed=5)
    assert content(writer) == expected
    # DuckDB reads through pyiceberg's scan, which applies the position deletes, and with its own
    # iceberg extension, which reads binlake's delete files itself.
    frame = writer.table.scan().to_duckdb("t").sql("SELECT COUNT(*), COUNT(DISTINCT id) FROM t").fetchall()
    assert frame == [(len(expected), len(expected))]
    own = duckdb_iceberg.read(writer.table).to_pylist()
    assert {r["id"]: r["v"] for r in own} == expected
    assert len(own) == len(expected)


def test_merge_on_read_writes_deletes_instead_of_rewriting(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, properties=MOR))
    for start in range(0, 3000, 1000):
        writer.table.append(rows(list(range(start, start + 1000)), "v"))
    result = writer.merge_batch(
        1, rows([5, 1500, 2999, 7000], "u"), pa.table({"id": pa.array([6], pa.int64())})
    )
    assert (result.files_removed, result.bytes_removed) == (0, 0)
    summary = writer.table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None
    assert summary.additional_properties["added-position-deletes"] == "4"  # 5, 6, 1500, 2999
    assert writer.merge_batch(1, rows([5], "again"), None).outcome == "skipped"
    got = content(writer)
    assert (got[5], got[1500], got[7000], 6 in got, len(got)) == ("u5", "u1500", "u7000", False, 3000)


def test_composite_keys_merge_on_read(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, key=("o", "line"), properties=MOR))
    schema = pa.schema(
        [pa.field("o", pa.int64(), False), pa.field("line", pa.int64(), False), ("v", pa.string())]
    )
    writer.table.append(
        pa.table({"o": [1, 1, 2, 2], "line": [1, 2, 1, 2], "v": ["a", "b", "c", "d"]}, schema=schema)
    )
    upserts = pa.table({"o": [1, 3], "line": [2, 1], "v": ["B", "new"]}, schema=schema)
    writer.merge_batch(
        1, upserts, pa.table({"o": pa.array([2], pa.int64()), "line": pa.array([1], pa.int64())})
    )
    got = {(r["o"], r["line"]): r["v"] for r in writer.table.scan().to_arrow().to_pylist()}
    assert got == {(1, 1): "a", (1, 2): "B", (2, 2): "d", (3, 1): "new"}


def test_maintain_folds_delete_files_back_into_the_data(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    identifier = create(catalog, properties=MOR)
    writer = IcebergWriter(catalog, identifier)
    expected = apply_batches(writer, seed=9)
    writer.table.refresh()
    delete_files = {d.file_path: d for task in writer.table.scan().plan_files() for d in task.delete_files}
    assert delete_files
    # The snapshot's totals count the delete files, as Iceberg's own summaries do.
    assert _totals(writer) == (len(delete_files), sum(d.record_count for d in delete_files.values()))
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    report = maintain(
        catalog, store, "p", identifier, None, MaintenanceOptions(dt.timedelta(0), dt.timedelta(0))
    )
    assert report.files_compacted > 0
    writer.table.refresh()
    tasks = list(writer.table.scan().plan_files())
    assert [t for t in tasks if t.delete_files] == []  # every delete file retired
    assert _totals(writer) == (0, 0)
    assert content(writer) == expected
    deletes_on_disk = list((Path(writer.table.location().removeprefix("file://")) / "data").glob("deletes-*"))
    assert deletes_on_disk == []  # expired, then removed as orphans
    # Merging continues normally on the compacted table.
    writer.merge_batch(100, rows([1], "after"), None)
    assert content(writer)[1] == "after1"


def _totals(writer: IcebergWriter) -> tuple[int, int]:
    summary = writer.table.current_snapshot().summary  # type: ignore[union-attr]
    assert summary is not None
    extra = summary.additional_properties
    return int(extra["total-delete-files"]), int(extra["total-position-deletes"])
