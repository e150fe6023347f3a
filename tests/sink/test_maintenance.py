"""`binlake maintain`: compaction, snapshot expiry, orphan removal; refused while a writer holds the table."""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from binlake.config import PipelineConfig
from binlake.offsets import BinlogOffset
from binlake.sink.catalog import open_catalog
from binlake.sink.maintenance import MaintenanceOptions, MaintenanceRefusedError, maintain
from binlake.state.holders import Holder
from binlake.state.store import StateStore
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import pipeline_dict, run_binlake
from tests.sink.helpers import SCHEMA, create, make_catalog, rows

NOW = MaintenanceOptions(dt.timedelta(0), dt.timedelta(0))


def small_files(tmp_path: Path) -> tuple[StateStore, str, object]:
    catalog = make_catalog(tmp_path)
    identifier = create(catalog, properties={"write.target-file-size-bytes": str(1 << 20)})
    table = catalog.load_table(identifier)
    for start in range(0, 50, 10):
        table.append(rows(list(range(start, start + 10)), "v"))
    return StateStore(f"sqlite:///{tmp_path / 'state.db'}"), identifier, catalog


def test_compacts_expires_and_removes_orphans(tmp_path: Path) -> None:
    store, identifier, catalog = small_files(tmp_path)
    table = catalog.load_table(identifier)  # type: ignore[attr-defined]
    before = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    stray = Path(table.location().removeprefix("file://")) / "data" / "stray.parquet"
    pq.write_table(rows([999], "x"), stray)
    time.sleep(0.01)

    report = maintain(catalog, store, "p", identifier, None, NOW)  # type: ignore[arg-type]
    assert (report.files_compacted, report.files_written) == (5, 1)
    assert report.snapshots_expired == 5  # the five appends; the compaction's snapshot stays
    assert report.orphans_removed >= 6  # the stray file and the five compacted files
    assert not stray.exists()
    table.refresh()
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == before
    assert len(list(table.scan().plan_files())) == 1
    again = maintain(catalog, store, "p", identifier, None, NOW)  # type: ignore[arg-type]
    assert (again.files_compacted, again.orphans_removed) == (0, 0)


def test_young_orphans_are_kept(tmp_path: Path) -> None:
    store, identifier, catalog = small_files(tmp_path)
    table = catalog.load_table(identifier)  # type: ignore[attr-defined]
    stray = Path(table.location().removeprefix("file://")) / "data" / "in-flight.parquet"
    pq.write_table(rows([999], "x"), stray)
    options = MaintenanceOptions(dt.timedelta(days=7), dt.timedelta(days=1))
    report = maintain(catalog, store, "p", identifier, None, options)  # type: ignore[arg-type]
    assert report.snapshots_expired == 0
    assert stray.exists()  # may belong to a commit in flight


def test_refused_while_a_writer_holds_the_table(tmp_path: Path) -> None:
    store, identifier, catalog = small_files(tmp_path)
    writer = Holder.this_process("stream demo")
    store.leases("p").acquire(identifier, writer, dt.timedelta(minutes=5))
    with pytest.raises(MaintenanceRefusedError, match=r"held by `stream demo`.*stop the writer"):
        maintain(catalog, store, "p", identifier, None, NOW)  # type: ignore[arg-type]
    assert len(list(catalog.load_table(identifier).scan().plan_files())) == 5  # type: ignore[attr-defined]
    store.leases("p").release(identifier, writer)
    assert maintain(catalog, store, "p", identifier, None, NOW).files_compacted == 5  # type: ignore[arg-type]


def test_expired_lease_is_taken_over(tmp_path: Path) -> None:
    store, identifier, _ = small_files(tmp_path)
    store.leases("p").acquire(identifier, Holder.this_process("crashed writer"), dt.timedelta(seconds=-1))
    lease = store.leases("p").acquire(identifier, Holder.this_process("stream"), dt.timedelta(minutes=1))
    assert lease.holder == "stream"


def test_cli_maintain_after_plan(
    mariadb: PrivateMariaDB, database: str, write_config: Callable[..., Path], tmp_path: Path
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id BIGINT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO t VALUES (1, 'a')",
        database=database,
    )
    raw = pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work")
    path = write_config(raw)
    assert run_binlake("--config", str(path), "plan").returncode == 0
    config = PipelineConfig.model_validate(raw)
    identifier = f"{database}.t"
    table = open_catalog(config).load_table(identifier)  # plan created the Iceberg table
    assert [f.name for f in table.schema().fields] == ["id", "v"]

    refused = run_binlake(
        "--config", str(path), "maintain", "--expire-older-than", "0", "--orphans-older-than", "0"
    )
    assert refused.returncode == 1
    assert "snapshot is unfinished (0 of 1 chunks)" in refused.stderr

    store = StateStore(config.pipeline.resolved_state_uri)
    (plan,) = store.plans("test").load()
    store.plans("test").finish_chunk(
        plan.chunks[0].chunk, BinlogOffset("binlog.000001", 4), BinlogOffset("binlog.000001", 9), 1
    )
    for i in range(3):
        table.append(pa.table({"id": [i], "v": ["x"]}, schema=SCHEMA))
    done = run_binlake(
        "--config", str(path), "maintain", "--expire-older-than", "0", "--orphans-older-than", "0", "--json"
    )
    assert done.returncode == 0, done.output
    (report,) = json.loads(done.stdout)
    assert (report["table"], report["files_compacted"], report["files_written"]) == (identifier, 3, 1)
    bad = run_binlake("--config", str(path), "maintain", "--expire-older-than", "a week")
    assert bad.returncode == 2
    assert "is not a duration" in bad.stderr
    assert os.path.exists(config.pipeline.resolved_state_uri.removeprefix("sqlite:///"))


def test_compacts_files_whose_text_columns_other_writers_typed_apart(tmp_path: Path) -> None:
    """Spark's executors and pyiceberg write text as string or large_string: one compaction reads
    both (it failed with 'Schema at index 1 was different' when it joined the files' reads)."""
    catalog = make_catalog(tmp_path)
    identifier = create(catalog)
    table = catalog.load_table(identifier)
    table.append(rows([1, 2], "a"))
    wide = pa.schema([pa.field("id", pa.int64(), nullable=False), ("v", pa.large_string())])
    table.append(pa.table({"id": [3], "v": ["b3"]}, schema=wide))
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    report = maintain(catalog, store, "p", identifier, None, NOW)
    assert (report.files_compacted, report.files_written) == (2, 1)
    table.refresh()
    assert sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == [
        {"id": 1, "v": "a1"},
        {"id": 2, "v": "a2"},
        {"id": 3, "v": "b3"},
    ]
