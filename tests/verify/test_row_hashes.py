"""The sink's row hashes kept between verifications (``verify.row_hashes``): a data file is hashed
once; later verifications read its hashes, apply its position deletes since, and come to the sums
hashing every row anew gives — through deletes, updates, a compaction and a new column."""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.types import LongType

from binlake.events import Column, CreateTable, TableId
from binlake.offsets import BinlogOffset
from binlake.source.chunks.splitter import ChunkRange
from binlake.verify.sink_sums import ChunkIndex, PinnedSink, sink_sums
from tests.sink.helpers import SMALL_FILES_MOR, create, make_catalog, rows

COLUMNS = [
    Column("id", "bigint", "bigint(20)", nullable=False),
    Column("v", "varchar", "varchar(20)", collation="x"),
]
SCHEMA = CreateTable(TableId("db", "t"), tuple(COLUMNS), ("id",))
AT = BinlogOffset("binlog.000001", 4)


def _sums(table: object, hashes_in: Path | None, chunks: ChunkIndex) -> tuple[list[int], list[int]]:
    table.refresh()  # type: ignore[attr-defined]
    snapshot = table.current_snapshot()  # type: ignore[attr-defined]
    pinned = PinnedSink(table, snapshot.snapshot_id if snapshot else None, AT)  # type: ignore[arg-type]
    counts, totals = sink_sums(pinned, SCHEMA, COLUMNS, "id", chunks, False, hashes_in)
    return counts.tolist(), totals.tolist()


def test_kept_hashes_give_the_sums_of_hashing_anew(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from binlake.sink.writer import IcebergWriter

    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(
        catalog, create(catalog, properties=SMALL_FILES_MOR), key_index_dir=tmp_path / "index"
    )
    for start in range(0, 3000, 1000):
        writer.table.append(rows(list(range(start, start + 1000)), "v"))
    chunks = ChunkIndex(COLUMNS[0], [ChunkRange(None, 1000), ChunkRange(1000, 2000), ChunkRange(2000, None)])
    kept = tmp_path / "hashes"
    caplog.set_level(logging.INFO, logger="binlake.verify.sink_sums")

    files = len(list(writer.table.scan().plan_files()))
    first = _sums(writer.table, kept, chunks)
    assert first == _sums(writer.table, None, chunks)
    assert first[0] == [1000, 1000, 1000]
    assert f"the row hashes of 0 data files kept, {files} hashed" in caplog.text
    caplog.clear()
    assert _sums(writer.table, kept, chunks) == first
    assert f"the row hashes of {files} data files kept, 0 hashed" in caplog.text

    # Deletes and updates: position deletes on kept files, new files for the new rows.
    writer.merge_batch(1, rows([5, 1500], "u"), pa.table({"id": pa.array([7, 2500], pa.int64())}))
    caplog.clear()
    after = _sums(writer.table, kept, chunks)
    assert after == _sums(writer.table, None, chunks)
    assert after[0] == [999, 1000, 999]
    assert after[1] != first[1]
    new = len(list(writer.table.scan().plan_files())) - files
    assert f"of {files} data files kept, {new} hashed" in caplog.text  # the batch's new files alone

    # A new column: its values are hashed, so every file again (a new entry each), the old ones gone.
    with writer.table.update_schema() as update:
        update.add_column("w", LongType())
    wider = [*COLUMNS, Column("w", "bigint", "bigint(20)")]
    writer.table.refresh()
    pinned = PinnedSink(writer.table, writer.table.current_snapshot().snapshot_id, AT)  # type: ignore[union-attr]
    assert sink_sums(pinned, SCHEMA, wider, "id", chunks, False, kept)[0].tolist() == [999, 1000, 999]
    entries = list(kept.rglob("*.arrow"))
    assert len(entries) == files + new  # each data file once, under the new columns only
