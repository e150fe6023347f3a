"""The DAG files: they import fast and clean, every DAG is documented, and parsing opens nothing.

Airflow is imported in a child process with its own AIRFLOW_HOME, as the DAG processor would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).parents[2]

#: Runs in the child: parse the DAG folder with every socket connect and the state store trapped.
PARSE = r"""
import json, socket, sys, time
opened = []
def trap(self, address, *args):
    opened.append(str(address))
    raise OSError("binlake test: no connection may be opened at parse time")
socket.socket.connect = trap
socket.socket.connect_ex = trap
import binlake.state.store as store
def no_store(self, uri):
    opened.append("state store " + uri)
    raise RuntimeError("binlake test: the state store must not be opened at parse time")
store.StateStore.__init__ = no_store
from airflow.dag_processing.dagbag import DagBag
started = time.monotonic()
bag = DagBag(dag_folder=sys.argv[1])
seconds = time.monotonic() - started
dags = {
    dag_id: {
        "tags": sorted(dag.tags),
        "doc_md": dag.doc_md or "",
        "max_active_runs": dag.max_active_runs,
        "retries": {t.task_id: t.retries for t in dag.tasks},
        "tasks": sorted(t.task_id for t in dag.tasks),
    }
    for dag_id, dag in bag.dags.items()
}
stats = [{"file": s.file, "seconds": s.duration.total_seconds()} for s in bag.dagbag_stats]
engines = ("pyspark", "great_expectations", "pyiceberg", "pymysqlreplication", "connectorx")
heavy = sorted(m for m in engines if m in sys.modules)
print(json.dumps({"errors": {k: str(v) for k, v in bag.import_errors.items()}, "dags": dags,
                  "stats": stats, "opened": opened, "heavy_imports": heavy, "seconds": seconds}))
"""


def parse_dags(tmp_path: Path, pipelines: Path) -> dict[str, Any]:
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(tmp_path / "airflow"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "false",
        "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
        "BINLAKE_PIPELINES_DIR": str(pipelines),
    }
    proc = subprocess.run(
        [sys.executable, "-c", PARSE, str(ROOT / "dags")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.fixture
def pipelines(tmp_path: Path) -> Path:
    """The demo pipeline and a second one whose source is unreachable and unset in the environment."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "demo.yaml").write_text((ROOT / "include/pipelines/demo.yaml").read_text())
    other = {
        "pipeline": {"name": "orders", "work_dir": "${ORDERS_WORK_DIR}"},
        "source": {"hostname": "192.0.2.1", "port": 1, "username": "u", "password": "${ORDERS_PASSWORD}",
                   "tables": [r"db\.orders"]},
        "airflow": {"source_conn_id": "orders_mysql", "tags": ["team-a"], "pool": "binlake"},
    }  # fmt: skip
    (folder / "orders.yml").write_text(yaml.safe_dump(other))
    return folder


def test_every_dag_imports_fast_documented_and_without_connections(tmp_path: Path, pipelines: Path) -> None:
    parsed = parse_dags(tmp_path, pipelines)
    assert parsed["errors"] == {}
    assert parsed["opened"] == []  # no socket, no state store while parsing
    assert parsed["heavy_imports"] == []
    assert set(parsed["dags"]) == {
        "binlake__demo",
        "binlake__demo__ddl",
        "binlake__demo__backfill",
        "binlake__demo__verify",
        "binlake__orders",
        "binlake__orders__ddl",
        "binlake__orders__backfill",
        "binlake__orders__verify",
    }
    # Parse speed is guarded by what the parse may import (heavy_imports), not by a timed
    # assertion: machines differ 3x between sessions.
    assert len(parsed["stats"]) == 1
    for dag_id, dag in parsed["dags"].items():
        assert {"binlake", "cdc"} <= set(dag["tags"]), dag_id
        assert dag["doc_md"].startswith("### "), dag_id
        assert dag["max_active_runs"] == 1, dag_id
        assert all(retries >= 1 for retries in dag["retries"].values()), dag_id
    assert parsed["dags"]["binlake__demo"]["tasks"] == [
        "plan", "quality", "quality_after_stream", "snapshot", "stream", "switch", "validate",
    ]  # fmt: skip
    assert parsed["dags"]["binlake__demo__ddl"]["tasks"] == [
        "apply_schema_change", "quality", "wait_for_schema_change",
    ]  # fmt: skip
    assert parsed["dags"]["binlake__demo__backfill"]["tasks"] == [
        "backfill",
        "plan",
        "quality",
        "wait_applied",
    ]
    assert parsed["dags"]["binlake__demo__verify"]["tasks"] == [
        "backfill", "stage_repair", "verify", "verify_again", "wait_applied",
    ]  # fmt: skip
    assert "team-a" in parsed["dags"]["binlake__orders"]["tags"]


def test_a_broken_pipeline_file_is_an_import_error_naming_the_file(tmp_path: Path, pipelines: Path) -> None:
    (pipelines / "broken.yaml").write_text("pipeline:\n  name: 9 bad name\nsource: {}\n")
    parsed = parse_dags(tmp_path, pipelines)
    [(file, error)] = parsed["errors"].items()
    assert file.endswith("binlake_pipelines.py")
    assert "broken.yaml" in error
    assert "must start with a letter" in error


def test_the_docker_pipeline_is_a_valid_config_with_its_connection(tmp_path: Path) -> None:
    from binlake.config.pipeline_file import load_config

    config = load_config(
        ROOT / "docker/pipelines/demo.yaml",
        environ={},
        source_overrides={"hostname": "mysql", "port": 3306, "username": "binlake", "password": "pw"},
    )
    assert config.airflow.source_conn_id == "binlake_mysql"
    assert config.source.hostname == "mysql"
    assert config.pipeline.resolved_state_uri.startswith("postgresql")


def test_jobs_take_the_source_from_the_environment_airflow_sets() -> None:
    from binlake.airflow.runtime import source_env
    from binlake.config.pipeline_file import source_from_env

    env = source_env({"hostname": "db", "port": 3307, "username": "u", "password": "pw", "extra": 1})
    assert env == {"BINLAKE_SOURCE_HOSTNAME": "db", "BINLAKE_SOURCE_PORT": "3307",
                   "BINLAKE_SOURCE_USERNAME": "u", "BINLAKE_SOURCE_PASSWORD": "pw"}  # fmt: skip
    assert source_from_env(env) == {"hostname": "db", "port": "3307", "username": "u", "password": "pw"}
    assert source_from_env({}) is None
