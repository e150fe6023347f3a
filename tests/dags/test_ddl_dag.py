"""The DDL DAG with a running stream: ALTER TABLE → the stream waits → the sensor fires, the apply
task applies it, the stream resumes; the sink equals the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from binlake.events import AddColumn, TableId
from binlake.planner import plan
from binlake.spark.snapshot_job import run_snapshot
from binlake.state.offset_names import STREAM
from binlake.state.store import StateStore
from binlake.testing.compare import compare, sink_rows
from binlake.testing.private_server import PrivateMariaDB
from tests.dags.conftest import airflow_pipeline, config_of, start_stream, stop_stream, wait_for
from tests.helpers import config_dict

pytestmark = pytest.mark.slow


def test_ddl_dag_applies_the_change_a_running_stream_waits_on(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any, local_airflow: Any, write_config: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, seq FROM seq_1_to_200",
        database=database,
    )
    pipeline = airflow_pipeline(database, tmp_path / "work", schema_change_applier="external",
                                schema_change_timeout_s=600)  # fmt: skip
    pipeline["pipeline"]["schema_change_behavior"] = "evolve"
    airflow = local_airflow(pipeline)
    config = config_of(pipeline, mariadb)
    plan(config)
    assert run_snapshot(config, spark).complete
    store = StateStore(config.pipeline.resolved_state_uri)
    raw = config_dict(config)
    path = write_config(raw)
    stream = start_stream(path)
    try:
        wait_for("the stream's first batch", lambda: store.offsets("demo").load(STREAM))
        mariadb.execute(
            "INSERT INTO t VALUES (201, 201)",
            "ALTER TABLE t ADD COLUMN w VARCHAR(10)",
            "INSERT INTO t VALUES (202, 202, 'new')",
            "UPDATE t SET w = 'old' WHERE id = 1",
            database=database,
        )
        [pending] = wait_for("the pending change", lambda: store.schema_requests("demo").all("pending"))
        assert isinstance(pending.change, AddColumn)
        t = TableId(database, "t")
        # Flushed before the change, nothing after it: the stream waits for the DDL DAG.
        ids = wait_for("row 201 in the sink", lambda: {r["id"] for r in sink_rows(config, t)} >= {201} and
                       {r["id"] for r in sink_rows(config, t)})  # fmt: skip
        assert 202 not in ids
        assert stream.poll() is None

        run = airflow.run("dags", "test", "binlake__demo__ddl", timeout=600)
        assert run.returncode == 0, run.output[-5000:]
        states = airflow.task_states("binlake__demo__ddl")
        assert states == {
            ("wait_for_schema_change", -1): "success",
            ("apply_schema_change", -1): "success",
            ("quality", -1): "success",
        }
        assert airflow.xcoms("binlake__demo__ddl", "apply_schema_change") == [[f"{database}.t"]]
        [quality] = airflow.xcoms("binlake__demo__ddl", "quality")
        assert list(quality["tables"]) == [f"{database}.t"]
        assert [r.status for r in store.schema_requests("demo").all()] == ["applied"]

        # The stream resumes with the new column, up to the last change.
        def changed_after_the_ddl() -> dict[int, Any] | None:
            found = {r["id"]: r for r in sink_rows(config, t) if r["id"] in (1, 202) and r["w"]}
            return found if len(found) == 2 else None

        rows = wait_for("the changes after the DDL in the sink", changed_after_the_ddl)
        assert rows[202]["w"] == "new"
    finally:
        output = stop_stream(stream)
    assert stream.returncode == 0, output[-3000:]
    assert [r for r in compare(config) if not r.equal] == []
    assert {r["id"]: r["w"] for r in sink_rows(config, TableId(database, "t"))}[1] == "old"
