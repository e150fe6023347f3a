"""Builders for the sink's tests: a catalog in a temp folder, a keyed table, rows, its content, and
a compacting merge-on-read writer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from binlake.events import Column, CreateTable, TableId
from binlake.sink.compaction import CompactionPolicy
from binlake.sink.layout import TableLayout
from binlake.sink.metadata_applier import IcebergMetadataApplier
from binlake.sink.writer import IcebergWriter

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])
#: Merge-on-read, files of ~1000 rows count as full-sized; each batch's new rows make a small file.
SMALL_FILES_MOR = {"write.merge.mode": "merge-on-read", "write.target-file-size-bytes": str(12_000)}
#: What a keyed table had before merge-on-read became its default (tests of copy-on-write's own ways).
COPY_ON_WRITE = {"write.merge.mode": "copy-on-write"}
POLICY = CompactionPolicy(deleted_share=0.3, budget_factor=4.0, small_files=4, delete_files=3)


def make_catalog(tmp_path: Path) -> SqlCatalog:
    warehouse = tmp_path / "warehouse"
    warehouse.mkdir(exist_ok=True)
    return SqlCatalog("test", uri=f"sqlite:///{tmp_path / 'catalog.db'}", warehouse=f"file://{warehouse}")


def create(catalog: SqlCatalog, name: str = "t", key: tuple[str, ...] = ("id",), **layout: Any) -> str:
    columns = [Column(k, "bigint", "bigint(20)", nullable=False) for k in key]
    columns.append(Column("v", "varchar", "varchar(20)", collation="x"))
    applier = IcebergMetadataApplier(catalog, lambda t: (t.database, t.table), TableLayout(**layout))
    applier.apply(CreateTable(TableId("db", name), tuple(columns), key))
    return f"db.{name}"


def rows(ids: list[int], tag: str) -> pa.Table:
    return pa.table({"id": ids, "v": [f"{tag}{i}" for i in ids]}, schema=SCHEMA)


def content(writer: IcebergWriter) -> dict[int, str]:
    writer.table.refresh()
    return {r["id"]: r["v"] for r in writer.table.scan().to_arrow().to_pylist()}


def compacting_writer(
    tmp_path: Path, policy: CompactionPolicy | None = POLICY, background_upkeep: bool = False
) -> IcebergWriter:
    """A writer of a new ``SMALL_FILES_MOR`` table with a key index, compacting by ``policy``."""
    catalog = make_catalog(tmp_path)
    identifier = create(catalog, properties=SMALL_FILES_MOR)
    return IcebergWriter(
        catalog, identifier, key_index_dir=tmp_path / "index", compaction=policy,
        background_upkeep=background_upkeep,
    )  # fmt: skip


def fill(writer: IcebergWriter, count: int) -> dict[int, str]:
    """``count`` rows appended in files of 1000; their content."""
    for start in range(0, count, 1000):
        writer.table.append(rows(list(range(start, min(count, start + 1000))), "v"))
    return {i: f"v{i}" for i in range(count)}


def compactions(writer: IcebergWriter) -> int:
    """The table's snapshots that a compaction made."""
    return sum(
        1
        for s in writer.table.snapshots()
        if s.summary is not None and s.summary.additional_properties.get("binlake.operation") == "compact"
    )
