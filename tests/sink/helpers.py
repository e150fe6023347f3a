"""Builders for the sink's tests: a catalog in a temp folder, a keyed table, rows, its content."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from binlake.events import Column, CreateTable, TableId
from binlake.schema.metadata_applier import IcebergMetadataApplier, TableLayout
from binlake.sink.writer import IcebergWriter

SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.string())])


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
