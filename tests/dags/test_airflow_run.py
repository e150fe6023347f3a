"""`airflow dags test binlake__demo` against the private MariaDB: every task, XCom, Data Docs, Assets."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from binlake.state.store import StateStore
from binlake.testing import demo
from binlake.testing.compare import compare
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload
from tests.dags.conftest import airflow_pipeline, config_of
from tests.helpers import page_text

pytestmark = pytest.mark.slow


def test_dags_test_runs_snapshot_quality_and_stream_into_an_exact_sink(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, local_airflow: Any
) -> None:
    demo.load(mariadb.admin_connection, 3000, database=database)
    pipeline = airflow_pipeline(database, tmp_path / "work")
    airflow = local_airflow(pipeline)
    # Writes while the snapshot runs; over before the stream task starts (it catches up to its start).
    workload = Workload(mariadb.admin_connection, database=database, rate=200, txn_size=2).start(seconds=10)
    run = airflow.run(
        "dags", "test", "binlake__demo", "-c", '{"stream_mode": "until-caught-up"}', timeout=900
    )
    stats = workload.stop()
    assert run.returncode == 0, run.output[-5000:]
    assert stats.total > 100

    states = airflow.task_states("binlake__demo")
    assert set(states.values()) == {"success"}, states
    assert {t for t, _ in states} == {
        "validate", "plan", "snapshot", "switch", "quality", "stream", "quality_after_stream",
    }  # fmt: skip
    assert sum(t == "snapshot" for t, _ in states) == 2  # mapped over the chunk groups

    # XCom holds every chunk's high watermark, as the state store does.
    config = config_of(pipeline, mariadb)
    pushed = {
        k: v for x in airflow.xcoms("binlake__demo", "snapshot") for k, v in x["high_watermarks"].items()
    }
    stored = {
        f"{p.table.name}#{c.chunk.chunk_id}": c.high_watermark.to_dict()
        for p in StateStore(config.pipeline.resolved_state_uri).plans("demo").load()
        for c in p.chunks
        if c.high_watermark is not None
    }
    assert len(stored) > 7
    assert pushed == stored

    # Data Docs: the report of the quality task exists and shows the expectations; the task links it.
    [summary] = airflow.xcoms("binlake__demo", "quality")
    assert summary["success"] is True
    index = Path(summary["report"])
    assert index.exists()
    assert index.is_relative_to(tmp_path / "work" / "reports")
    orders = Path(summary["tables"][f"{database}.order_items"]["report"])
    text = page_text(orders)
    assert "values must be greater than or equal to 1" in text
    assert "values must never be null" in text
    assert re.search(r"Must have greater than or equal to \d+ and less than or equal to \d+ rows", text)
    [link] = airflow.xcoms("binlake__demo", "quality", "_link_DataDocsLink")
    assert link.endswith(f"/binlake/reports/demo/{index.parent.name}/index.html")

    # Each sink table is an Asset the snapshot and the stream updated.
    events = dict(airflow.query(
        "SELECT a.uri, COUNT(*) FROM asset_event e JOIN asset a ON a.id = e.asset_id GROUP BY a.uri"
    ))  # fmt: skip
    assert events[f"iceberg://binlake_demo/{database}/orders"] >= 2
    # ... and its events say how the table is laid out (partitions, sort order) for its readers.
    extras = airflow.query(
        "SELECT e.extra FROM asset_event e JOIN asset a ON a.id = e.asset_id WHERE a.uri = ?",
        f"iceberg://binlake_demo/{database}/orders",
    )
    assert {json.loads(x)["sort_by"][0] for (x,) in extras} == {"id ASC NULLS FIRST"}
    assert all(json.loads(x)["partition_by"] == [] for (x,) in extras)

    # OpenLineage (Airflow's provider, file transport): MySQL tables in, Iceberg tables out.
    lineage = [e for e in airflow.lineage() if e.get("eventType") == "COMPLETE"]
    by_task = {e["job"]["name"].split(".")[-1]: e for e in lineage}
    snapshots = [e for e in lineage if e["job"]["name"].endswith(".snapshot")]  # mapped: one a task
    assert len(snapshots) == 2
    inputs = [d for e in snapshots for d in e["inputs"]]
    assert {d["namespace"] for d in inputs} == {f"mysql://127.0.0.1:{mariadb.port}"}
    assert f"{database}.orders" in {d["name"] for d in inputs}
    stream_outputs = by_task["stream"]["outputs"]
    symlinks = {i["name"] for d in stream_outputs for i in d["facets"]["symlinks"]["identifiers"]}
    assert f"{database}.orders" in symlinks
    assert all(
        d["name"].endswith(d["facets"]["symlinks"]["identifiers"][0]["name"].split(".")[-1])
        for d in stream_outputs
    )
    orders_out = next(d for e in snapshots for d in e["outputs"] if d["name"].endswith("/orders"))
    assert {f["name"] for f in orders_out["facets"]["schema"]["fields"]} >= {"id", "customer_id", "total"}
    written = sum(d["outputFacets"]["outputStatistics"]["rowCount"] for e in snapshots for d in e["outputs"])
    plans = StateStore(config.pipeline.resolved_state_uri).plans("demo").load()
    assert written == sum(c.row_count or 0 for p in plans for c in p.chunks)
    assert mariadb.password not in json.dumps(lineage)

    assert [r for r in compare(config) if not r.equal] == []
    assert mariadb.password not in run.output

    # A failing expectation fails the quality task (on_failure: fail), naming it and the report.
    pipeline["quality"]["tables"][f"{database}.order_items"][0]["kwargs"]["max_value"] = 1
    (Path(airflow.env["BINLAKE_PIPELINES_DIR"]) / "demo.yaml").write_text(yaml.safe_dump(pipeline))
    failed = airflow.run("tasks", "test", "binlake__demo", "quality", timeout=300)
    # (`airflow tasks test` exits 0 whatever the task did: the task's own state says it failed)
    assert re.search(r"Task instance state updated .* new_state=failed", failed.output)
    assert "Data quality failed" in failed.output
    expectation = r"expect_column_values_to_be_between\(.*max_value=1.*\): found \d+ unexpected"
    named = rf"{database}\.order_items: {expectation}"
    assert re.search(named, failed.output)
    assert mariadb.password not in failed.output
