"""Backfills: chosen tables (or a key range) read again with watermarks and staged; the stream
applies each unit when it reaches the unit's high watermarks, rolled forward when it is past them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from binlake.backfill import BackfillError
from binlake.backfill.plan import KeyRange
from binlake.backfill.wait import wait_applied
from binlake.cli import main as cli_main
from binlake.config import BackfillConfig, PipelineConfig
from binlake.events import TableId
from binlake.planner import plan
from binlake.sink.catalog import open_catalog, sink_name
from binlake.spark.backfill_job import run_backfill
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.state.backfills import BackfillLedger
from binlake.state.store import StateStore
from binlake.testing.compare import compare, sink_rows
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import assert_sink_equals_source, config_dict, job_metric, stream_config, with_metrics_dir


def sink_table(config: PipelineConfig, table: TableId) -> Any:
    return open_catalog(config).load_table(sink_name(config, table))


def damage(config: PipelineConfig, database: str) -> None:
    """Rows lost, a stale value, and rows the source never had, written straight into Iceberg."""
    t = sink_table(config, TableId(database, "t"))
    t.delete("id >= 1000 and id < 1100")
    stale = next(iter(t.scan(row_filter="id == 5").to_arrow().to_pylist()))
    t.delete("id == 5")
    extra = [{**stale, "v": "stale"}, {**stale, "id": 2500, "v": "never in the source"}]
    t.append(pa.Table.from_pylist(extra, schema=t.schema().as_arrow()))
    views = sink_table(config, TableId(database, "page_views"))
    views.delete("customer_id == 7")
    views.append(pa.Table.from_pylist([{"customer_id": 9, "b": "extra"}], schema=views.schema().as_arrow()))


def differing(config: PipelineConfig) -> list[str]:
    return sorted(r.table for r in compare(config) if not r.equal)


@pytest.mark.slow
def test_backfill_repairs_the_sink_rolled_forward_past_the_stream(
    mariadb: PrivateMariaDB,
    database: str,
    tmp_path: Path,
    spark: Any,
    write_config: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(30), n INT)",
        "INSERT INTO t SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_3000",
        "CREATE TABLE page_views (customer_id INT, b VARCHAR(20))",
        "INSERT INTO page_views SELECT seq % 20, 'x' FROM seq_1_to_400",
        "INSERT INTO page_views VALUES (NULL, 'n'), (7, 'x')",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=400)
    config = config.model_copy(update={"backfill": BackfillConfig(unit_rows=1000)})  # 2 chunks of 500
    config = with_metrics_dir(config, tmp_path / "metrics")
    plan(config)
    assert run_snapshot(config, spark).complete
    run_stream(config, spark, until_caught_up=True)
    damage(config, database)
    assert differing(config) == [f"{database}.page_views", f"{database}.t"]  # the test can fail

    report = run_backfill(config, spark, "b1", chunk_size=500)
    assert report.rows == 3000 + 402
    assert report.staged == report.units
    store = StateStore(config.pipeline.resolved_state_uri)
    ledger, name = BackfillLedger(store), config.pipeline.name
    units = ledger.units(name, "b1")
    # The backfill's metrics textfile: rows staged and chunks read per table, a run that ended well.
    metrics = tmp_path / "metrics"
    assert job_metric(metrics, name, "backfill", "rows", table=f"{database}.t") == 3000
    assert job_metric(metrics, name, "backfill", "chunks", table=f"{database}.page_views", state="read") == 1
    assert job_metric(metrics, name, "backfill", "success") == 1
    # page_views: 1 chunk; t: about 6 (the even split's step follows the server's row estimate),
    # at most 2 of them per unit (backfill.unit_rows).
    assert [len(u.chunks) for u in units if u.table.table == "page_views"] == [1]
    in_t = [len(u.chunks) for u in units if u.table.table == "t"]
    assert len(in_t) >= 3
    assert max(in_t) == 2
    # The stream passes the units' high watermarks without them (as when it runs on while the
    # backfill reads): hidden, then handed over once the stream is past.
    ledger.finish(name, units, "stale", "hidden by the test")
    mariadb.execute(
        "UPDATE t SET v = 'after h' WHERE id IN (1, 1050, 2999)",
        "DELETE FROM t WHERE id IN (2, 1060)",
        "UPDATE t SET id = 5000 WHERE id = 3",  # a key moves out of its chunk
        "INSERT INTO page_views VALUES (7, 'after h'), (NULL, 'after h')",
        "DELETE FROM page_views WHERE customer_id = 3 LIMIT 1",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    ledger.finish(name, units, "staged")
    mariadb.execute(
        "UPDATE t SET n = -1 WHERE id IN (1, 1070)",
        "INSERT INTO t VALUES (1060, 'back in the batch', 0)",
        "INSERT INTO page_views VALUES (8, 'in the batch')",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    assert wait_applied(config, "b1", timeout_s=1)
    # Exact only if the units were rolled forward: the staged rows predate the changes "after h",
    # which the stream had applied before it replaced the ranges with them.
    assert_sink_equals_source(config)
    assert {r["id"]: r["v"] for r in sink_rows(config, TableId(database, "t"))}[1] == "after h"
    # Staged files are gone once applied.
    assert not list((tmp_path / "work").rglob("backfill/b1/*.parquet"))

    # A key range on a quiet source: no batch comes, the stream applies it between batches.
    t = sink_table(config, TableId(database, "t"))
    t.delete("id >= 200 and id < 260")
    run_backfill(config, spark, "b2", tables=[f"{database}.t"], key_range=KeyRange(150, 300))
    assert [u.status for u in ledger.units(name, "b2")] == ["staged"]
    [folder] = {Path(f).parent for u in ledger.units(name, "b2") for f in u.files}
    shutil.copytree(str(folder).removeprefix("file:"), tmp_path / "kept")
    run_stream(config, spark, until_caught_up=True)
    assert [u.status for u in ledger.units(name, "b2")] == ["applied"]
    assert_sink_equals_source(config)
    assert len(sink_rows(config, TableId(database, "t"))) == 2999

    # A crash between the commit and the ledger's update leaves an applied unit staged, its files
    # still there: the stream applies it again, rolled forward to its new position — the same table.
    shutil.copytree(tmp_path / "kept", str(folder).removeprefix("file:"), dirs_exist_ok=True)
    ledger.finish(name, ledger.units(name, "b2"), "staged")
    mariadb.execute("UPDATE t SET v = 'again' WHERE id IN (200, 1000)", database=database)
    run_stream(config, spark, until_caught_up=True)
    assert [u.status for u in ledger.units(name, "b2")] == ["applied"]
    assert_sink_equals_source(config)
    store.close()

    # `binlake status` lists the backfills with their units.
    raw = config_dict(config)
    capsys.readouterr()
    assert cli_main(["--config", str(write_config(raw)), "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert [(b["backfill_id"], b["units"]) for b in status["backfills"]] == [
        ("b1", {"applied": len(units)}), ("b2", {"applied": 1}),
    ]  # fmt: skip


@pytest.mark.slow
def test_units_read_before_a_schema_change_go_stale_and_a_rerun_applies_them(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """The stream reached the units only after their table's schema changed (a long backfill read
    while the stream ran on past an ALTER): their rows have the old shape, so the stream applies
    none of them, marks them stale and removes their files; a rerun reads them again."""
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(30), n INT)",
        "INSERT INTO t SELECT seq, CONCAT('v', seq), seq FROM seq_1_to_2000",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=400)
    plan(config)
    assert run_snapshot(config, spark).complete
    run_stream(config, spark, until_caught_up=True)
    t = sink_table(config, TableId(database, "t"))
    t.delete("id >= 100 and id < 150")  # lost rows, for the backfill to repair
    assert differing(config) == [f"{database}.t"]

    report = run_backfill(config, spark, "b1", chunk_size=500)
    assert report.staged == report.units
    store = StateStore(config.pipeline.resolved_state_uri)
    ledger, name = BackfillLedger(store), config.pipeline.name
    units = ledger.units(name, "b1")
    staged = [f for u in units for f in u.files]
    assert staged
    assert all(Path(f.removeprefix("file:")).is_file() for f in staged)
    ledger.finish(name, units, "stale", "hidden by the test")  # the stream runs on without them…
    mariadb.execute(
        "ALTER TABLE t ADD COLUMN w INT",  # … past their table's schema change
        "UPDATE t SET v = 'after the change', w = 8 WHERE id IN (1, 1500)",
        database=database,
    )
    run_stream(config, spark, until_caught_up=True)
    ledger.finish(name, units, "staged")
    mariadb.execute("UPDATE t SET n = -1 WHERE id = 2", database=database)
    run_stream(config, spark, until_caught_up=True)

    after = ledger.units(name, "b1")
    assert {u.status for u in after} == {"stale"}
    assert all("changed between the backfill's read" in (u.message or "") for u in after)
    assert not any(Path(f.removeprefix("file:")).exists() for f in staged)
    # Nothing of the old shape was written: the stream's own changes are there, and the rows the
    # backfill was to repair are still missing.
    rows = {r["id"]: r for r in sink_rows(config, TableId(database, "t"))}
    assert (rows[1]["v"], rows[1]["w"], rows[2]["n"], rows[3]["w"]) == ("after the change", 8, -1, None)
    assert 100 not in rows
    assert differing(config) == [f"{database}.t"]

    rerun = run_backfill(config, spark, "b1", chunk_size=500)
    assert rerun.staged == rerun.units
    run_stream(config, spark, until_caught_up=True)
    assert {u.status for u in ledger.units(name, "b1")} == {"applied"}
    assert_sink_equals_source(config)
    store.close()


def test_backfills_the_pipeline_cannot_take_are_refused(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, binlake_cli: Any, write_config: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY)",
        "CREATE TABLE names (name VARCHAR(20) PRIMARY KEY)",
        "INSERT INTO t VALUES (1), (2)",
        database=database,
    )
    metrics = tmp_path / "metrics"
    config = with_metrics_dir(stream_config(mariadb, database, tmp_path), metrics)
    raw = config_dict(config)
    cli = binlake_cli("--config", str(write_config(raw)), "backfill", "--table", f"{database}.t")
    assert cli.returncode != 0
    assert "binlake backfill: error: Pipeline `test` has no finished snapshot" in cli.stderr
    assert "Traceback" not in cli.stderr
    assert mariadb.password not in cli.stderr + cli.stdout
    with pytest.raises(BackfillError, match=r"no finished snapshot.*Fix: run `binlake snapshot`"):
        run_backfill(config, spark, "x")
    plan(config)
    assert run_snapshot(config, spark).complete
    # The snapshot's metrics textfile: each table's rows and chunks, a run that ended well.
    name = config.pipeline.name
    assert job_metric(metrics, name, "snapshot", "rows", table=f"{database}.t") == 2
    assert job_metric(metrics, name, "snapshot", "chunks", table=f"{database}.t", state="done") == 1
    assert job_metric(metrics, name, "snapshot", "chunks", table=f"{database}.t", state="planned") == 1
    assert job_metric(metrics, name, "snapshot", "success") == 1
    assert job_metric(metrics, name, "snapshot", "running") == 0
    mariadb.execute("INSERT INTO t VALUES (3)", database=database)
    with pytest.raises(BackfillError, match=r"not tables of the pipeline"):
        run_backfill(config, spark, "x", tables=["nope.t"])
    assert job_metric(metrics, name, "backfill", "success") == 0  # a refused run: failed, ended
    assert job_metric(metrics, name, "backfill", "running") == 0
    assert (job_metric(metrics, name, "backfill", "end_timestamp_seconds") or 0) > 0
    with pytest.raises(BackfillError, match=r"chunk key `name` is text"):
        run_backfill(config, spark, "x", tables=[f"{database}.names"])
    with pytest.raises(BackfillError, match=r"range \[5, 5\) is empty"):
        KeyRange(5, 5)
    store = StateStore(config.pipeline.resolved_state_uri)
    assert BackfillLedger(store).units(config.pipeline.name) == []  # nothing recorded by a refused backfill
    store.close()
