"""The stream keeps a bounded number of snapshots per table: the oldest beyond ``keep`` expire in
bulk, the snapshots recording chunks never do, and the table and its exactly-once record stay
exact for pyiceberg and DuckDB's own reader."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from binlake.offsets import BinlogOffset
from binlake.sink.exactly_once import ChunkCommit
from binlake.sink.writer import IcebergWriter
from binlake.testing import duckdb_iceberg
from tests.sink.helpers import content, create, make_catalog, rows

HIGH = BinlogOffset("binlog.000001", 500)


def _chunked_writer(tmp_path: Path, keep: int, **layout: object) -> IcebergWriter:
    """A table whose first 300 rows came in three chunk commits, as a snapshot leaves it."""
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, **layout), keep_snapshots=keep)  # type: ignore[arg-type]
    for chunk in range(3):
        path = tmp_path / f"chunk{chunk}.parquet"
        pq.write_table(rows(list(range(chunk * 100, chunk * 100 + 100)), "s"), path)
        assert (
            writer.append_files([f"file://{path}"], [ChunkCommit(f"t#{chunk}", HIGH, 100)]).outcome
            == "committed"
        )
    return writer


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_the_oldest_snapshots_expire_and_chunk_records_stay(tmp_path: Path, mode: str) -> None:
    writer = _chunked_writer(tmp_path, keep=8, properties={"write.merge.mode": mode})
    expected = {i: f"s{i}" for i in range(300)}
    most = 0
    for batch in range(1, 41):
        updated, deleted = [batch, 150 + batch, 1000 + batch], [250 + batch]
        offset = BinlogOffset("binlog.000001", 1000 + batch)
        writer.merge_batch(
            batch, rows(updated, f"b{batch}-"), pa.table({"id": pa.array(deleted, pa.int64())}), offset
        )
        expected.update({k: f"b{batch}-{k}" for k in updated})
        expected.pop(250 + batch)
        assert content(writer) == expected, f"batch {batch}"
        most = max(most, len(writer.table.snapshots()))
    # 3 chunk commits + at most keep + keep / 4 others (43 and more kept without expiry).
    assert 3 + 8 <= len(writer.table.snapshots()) <= most <= 3 + 8 + 2
    assert writer.committed_chunks() == {f"t#{c}": HIGH for c in range(3)}
    assert writer.append_files([], [ChunkCommit("t#0", HIGH, 100)]).outcome == "skipped"
    replay = writer.merge_batch(40, rows([1], "again-"), None, BinlogOffset("binlog.000001", 1040))
    assert replay.outcome == "skipped"
    own = duckdb_iceberg.read(writer.table, duckdb_iceberg.connect()).to_pylist()
    assert {r["id"]: r["v"] for r in own} == expected


def test_nothing_expires_when_keep_is_0(tmp_path: Path) -> None:
    writer = _chunked_writer(tmp_path, keep=0)
    for batch in range(1, 13):
        writer.merge_batch(batch, rows([batch], "b"), None, BinlogOffset("binlog.000001", 1000 + batch))
    assert len(writer.table.snapshots()) == 3 + 12
