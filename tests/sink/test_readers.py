"""Tables binlake's writer leaves read the same through DuckDB's own iceberg extension as through
pyiceberg, after every commit: both merge modes (binlake writes merge-on-read's position-delete
files itself), coalesced copy-on-write files, merged manifests, and schema changes."""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from pyiceberg.types import StringType

from binlake.events import Column, CreateTable, TableId
from binlake.schema.type_mapping import arrow_schema
from binlake.sink.layout import TableLayout
from binlake.sink.metadata_applier import IcebergMetadataApplier
from binlake.sink.writer import IcebergWriter
from binlake.testing import duckdb_iceberg
from binlake.testing.compare import bag
from tests.sink.helpers import make_catalog

TABLE = CreateTable(
    TableId("db", "orders"),
    (
        Column("id", "bigint", "bigint(20)", nullable=False),
        Column("status", "varchar", "varchar(20)", collation="utf8mb4_general_ci"),
        Column("total", "decimal", "decimal(14,2)", precision=14, scale=2),
        Column("ordered_at", "datetime", "datetime(6)", fsp=6),
        Column("paid_at", "timestamp", "timestamp(3)", fsp=3),
        Column("day", "date", "date"),
        Column("weight", "double", "double"),
        Column("payload", "blob", "blob"),
    ),
    ("id",),
)


def _rows(ids: list[int], version: int, schema: pa.Schema) -> pa.Table:
    base = dt.datetime(2024, 2, 29, 23, 59, 59, 999999)
    values: dict[str, list[Any]] = {
        "id": ids,
        "status": [None if i % 7 == 0 else f"s{version}-é{i}" for i in ids],
        "total": [Decimal(i * 37 % 100000 + version) / 100 for i in ids],
        "ordered_at": [base - dt.timedelta(days=i, microseconds=version) for i in ids],
        "paid_at": [None if i % 3 else (base - dt.timedelta(hours=i)).replace(tzinfo=dt.UTC) for i in ids],
        "day": [dt.date(1970, 1, 1) + dt.timedelta(days=i) for i in ids],
        "weight": [i / 3 + version for i in ids],
        "payload": [bytes([i % 256, version % 256, 0]) for i in ids],
    }
    for extra in schema.names[len(values) :]:
        values[extra] = [f"{extra}-{i}" for i in ids]
    return pa.table(values, schema=schema)


def _assert_same(writer: IcebergWriter, con: Any) -> None:
    writer.table.refresh()
    ours = writer.table.scan().to_arrow()
    theirs = duckdb_iceberg.read(writer.table, con)
    assert theirs.num_rows == ours.num_rows
    assert bag(theirs.to_pylist()) == bag(ours.to_pylist())


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_duckdb_reads_every_commit_as_pyiceberg_does(mode: str, tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    IcebergMetadataApplier(
        catalog, lambda t: (t.database, t.table), TableLayout(properties={"write.merge.mode": mode})
    ).apply(TABLE)
    # Manifests merged after every few commits, as the stream does (stream.merge_manifests_at).
    writer = IcebergWriter(catalog, "db.orders", merge_manifests_at=4, key_index_dir=tmp_path / "index")
    con = duckdb_iceberg.connect()
    schema = arrow_schema(TABLE)
    writer.table.append(_rows(list(range(2000)), 0, schema))
    rng = random.Random(5)
    live = set(range(2000))
    for batch in range(1, 9):
        touched = rng.sample(sorted(live), 120)
        deleted, updated = touched[:20], touched[20:]
        fresh = list(range(2000 + batch * 10, 2000 + batch * 10 + 10))
        if batch == 5:  # a column added mid-stream: older files lack it
            with writer.table.update_schema() as update:
                update.add_column("note", StringType())
            writer.table.refresh()
            schema = writer.table.schema().as_arrow()
        writer.merge_batch(
            batch,
            _rows(sorted(updated + fresh), batch, schema),
            pa.table({"id": pa.array(deleted, pa.int64())}),
        )
        live = (live - set(deleted)) | set(fresh)
        _assert_same(writer, con)
    assert {r["id"] for r in duckdb_iceberg.read(writer.table, con).to_pylist()} == live
    if mode == "merge-on-read":
        summary = writer.table.current_snapshot().summary  # type: ignore[union-attr]
        assert summary is not None
        assert int(summary.additional_properties["total-position-deletes"]) > 0


def test_a_missing_extension_says_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb

    monkeypatch.setattr(duckdb, "__version__", "0.0.1")
    with pytest.raises(RuntimeError, match=r"holds it for DuckDB v\d.*0\.0\.1 is installed.*pin both"):
        duckdb_iceberg.extension_path("iceberg")


def test_the_docs_duckdb_lines_read_the_demo_table(tmp_path: Path) -> None:
    """The docs' DuckDB reader block (docs/sink.md), run as written in the folder of a demo-like
    pipeline (its catalog under the demo's name and path), with DuckDB's extension folder holding the wheels'
    extensions so that ``INSTALL`` needs no network (a dead proxy makes sure)."""
    from binlake.config.pipeline_file import parse_config
    from binlake.sink.catalog import open_catalog

    text = "pipeline: {name: demo, work_dir: .binlake}\n"
    text += "source: {hostname: db, username: u, tables: ['shop\\\\..*']}\n"
    config = parse_config(text.replace(".binlake", str(tmp_path / ".binlake")), "demo.yaml", {})
    catalog = open_catalog(config)
    orders = CreateTable(TableId("shop", "orders"), TABLE.columns, TABLE.primary_key)
    IcebergMetadataApplier(
        catalog,
        lambda t: (t.database, t.table),
        TableLayout(properties={"write.merge.mode": "merge-on-read"}),
    ).apply(orders)
    writer = IcebergWriter(catalog, "shop.orders")
    schema = writer.table.schema().as_arrow()
    writer.table.append(_rows(list(range(1, 31)), 0, schema))
    writer.merge_batch(1, _rows([3, 4], 1, schema), pa.table({"id": pa.array([5, 6, 7], pa.int64())}))

    folder = tmp_path / "home" / ".duckdb" / "extensions" / f"v{duckdb.__version__}"
    platform = duckdb.connect().execute("PRAGMA platform").fetchone()[0]
    (folder / platform).mkdir(parents=True)
    for name in duckdb_iceberg.EXTENSIONS:
        shutil.copy(duckdb_iceberg.extension_path(name), folder / platform / f"{name}.duckdb_extension")
    readme = (Path(__file__).parents[2] / "docs" / "sink.md").read_text()
    block = readme.split("<!-- duckdb-reader:", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    dead = "http://127.0.0.1:9"
    env = {**os.environ, "HOME": str(tmp_path / "home"), "http_proxy": dead, "https_proxy": dead}
    env.update(HTTP_PROXY=dead, HTTPS_PROXY=dead)
    run = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["27"]  # 30 rows, 3 deleted through a merge-on-read delete file
