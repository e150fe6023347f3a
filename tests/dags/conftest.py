"""Real Airflow for DAG tests: an AIRFLOW_HOME of the test's own (SQLite, migrated), the repository's
dags/ and plugins/, a pipeline folder with the test's pipeline, and `airflow dags test` to run."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from binlake.config import PipelineConfig
from binlake.planner import plan
from binlake.spark.snapshot_job import run_snapshot
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import config_dict

ROOT = Path(__file__).parents[2]
BIN = Path(sys.executable).parent
CONN_ID = "binlake_source"


@dataclass
class AirflowRun:
    returncode: int
    output: str


@dataclass
class LocalAirflow:
    home: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 600) -> AirflowRun:
        proc = subprocess.run(
            [str(BIN / "airflow"), *args], capture_output=True, text=True, env=self.env, timeout=timeout
        )
        return AirflowRun(proc.returncode, proc.stdout + proc.stderr)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [str(BIN / "airflow"), *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env=self.env, start_new_session=True,
        )  # fmt: skip

    def query(self, sql: str, *params: Any) -> list[tuple[Any, ...]]:
        with sqlite3.connect(self.home / "airflow.db") as db:
            return db.execute(sql, params).fetchall()

    def task_states(self, dag_id: str) -> dict[tuple[str, int], str]:
        rows = self.query("SELECT task_id, map_index, state FROM task_instance WHERE dag_id = ?", dag_id)
        return {(task, index): state for task, index, state in rows}

    def xcoms(self, dag_id: str, task_id: str, key: str = "return_value") -> list[Any]:
        rows = self.query(
            "SELECT value FROM xcom WHERE dag_id = ? AND task_id = ? AND key = ? ORDER BY map_index",
            dag_id, task_id, key,
        )  # fmt: skip
        return [json.loads(v) for (v,) in rows]

    def lineage(self) -> list[dict[str, Any]]:
        """The OpenLineage events Airflow's provider wrote (its file transport, one JSON a line)."""
        path = Path(json.loads(self.env["AIRFLOW__OPENLINEAGE__TRANSPORT"])["log_file_path"])
        return (
            [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            if path.exists()
            else []
        )


@pytest.fixture
def local_airflow(tmp_path: Path, mariadb: PrivateMariaDB) -> Callable[[dict[str, Any]], LocalAirflow]:
    """Make a migrated Airflow home whose pipeline folder holds ``pipeline`` (a config dict); the
    source's credentials are an Airflow connection, not in the YAML."""

    def make(pipeline: dict[str, Any]) -> LocalAirflow:
        home = tmp_path / "airflow"
        folder = tmp_path / "pipelines"
        folder.mkdir(exist_ok=True)
        (folder / f"{pipeline['pipeline']['name']}.yaml").write_text(yaml.safe_dump(pipeline))
        connection = {"conn_type": "mysql", "host": "127.0.0.1", "port": mariadb.port,
                      "login": mariadb.user, "password": mariadb.password}  # fmt: skip
        env = {
            **os.environ,
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "false",
            "BINLAKE_PIPELINES_DIR": str(folder),
            f"AIRFLOW_CONN_{CONN_ID.upper()}": json.dumps(connection),
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            # Airflow's OpenLineage provider writes every event to one file (``LocalAirflow.lineage``).
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": str(tmp_path / "lineage.jsonl"), "append": True}
            ),
        }
        airflow = LocalAirflow(home, env)
        migrated = airflow.run("db", "migrate", timeout=300)
        assert migrated.returncode == 0, migrated.output[-3000:]
        return airflow

    return make


def airflow_pipeline(database: str, work_dir: Path, **stream: Any) -> dict[str, Any]:
    """A pipeline named `demo` over ``database``, its source from the Airflow connection."""
    return {
        "pipeline": {"name": "demo", "work_dir": str(work_dir), "parallelism": 2,
                     "spark": {"master": "local[2]"}},
        "source": {"server_id": "5500-5508", "tables": [rf"{database}\..*"], "chunk_size": 500,
                   "chunk_key_columns": {f"{database}.page_views": "customer_id"}},
        "stream": {"trigger_interval_s": 1, **stream},
        "airflow": {"source_conn_id": CONN_ID, "snapshot_jobs": 2, "retries": 0},
        "quality": {"on_failure": "fail", "tables": {f"{database}.order_items": [
            {"expectation_type": "expect_column_values_to_be_between",
             "kwargs": {"column": "quantity", "min_value": 1}}]}},
    }  # fmt: skip


def wait_for(what: str, check: Callable[[], Any], timeout: float = 120) -> Any:
    """``check()``'s first truthy value, polled; fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def start_stream(config_path: Path) -> subprocess.Popen[str]:
    """``binlake stream`` (continuous) in a process group of its own, its output in a file beside
    ``config_path`` (a pipe nobody reads while it runs would fill, and block the stream's logging:
    a stream stuck mid-batch never applies the backfill a DAG waits for)."""
    with _output(config_path).open("w") as output:  # the child keeps its own descriptor
        return subprocess.Popen(
            [str(BIN / "binlake"), "--config", str(config_path), "stream"],
            stdout=output, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip


def _output(config_path: Path) -> Path:
    return config_path.with_name(f"{config_path.stem}.stream.log")


def stop_stream(stream: subprocess.Popen[str]) -> str:
    """SIGTERM (the stream ends after its current batch), then its output; killed after 2 minutes."""
    stream.send_signal(signal.SIGTERM)
    try:
        stream.wait(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(stream.pid, signal.SIGKILL)
        raise
    return _output(Path(stream.args[2])).read_text()


def config_of(pipeline: dict[str, Any], mariadb: PrivateMariaDB) -> PipelineConfig:
    source = {**pipeline["source"], "hostname": "127.0.0.1", "port": mariadb.port,
              "username": mariadb.user, "password": mariadb.password}  # fmt: skip
    return PipelineConfig.model_validate({**pipeline, "source": source})


def snapshotted_demo(
    mariadb: PrivateMariaDB, database: str, work_dir: Path, spark: Any, local_airflow: Any
) -> tuple[Any, PipelineConfig]:
    """The demo shop (2,000 rows) in ``database``, planned and snapshotted as pipeline ``demo``,
    with the local Airflow that runs its DAGs."""
    demo.load(mariadb.admin_connection, 2000, database=database)
    pipeline = airflow_pipeline(database, work_dir)
    airflow = local_airflow(pipeline)
    config = config_of(pipeline, mariadb)
    plan(config)
    assert run_snapshot(config, spark).complete
    return airflow, config


def start_stream_of(
    config: PipelineConfig, mariadb: PrivateMariaDB, write_config: Any
) -> subprocess.Popen[str]:
    """``start_stream`` of ``config`` (written to a file with its password)."""
    raw = config_dict(config)
    return start_stream(write_config(raw))
