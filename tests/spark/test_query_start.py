"""What a stream query's start costs: Spark's Python processes and what they import.

Every query starts Spark Python processes one after another (data source lookup, schema, the
streaming source's runner, read planning, the tasks' workers); what they import is on the path to
the first batch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark

from binlake.spark.runtime.preload import JOB_VARIABLE, PRELOAD, TASK_WORKER, modules_for
from binlake.spark.runtime.python_path import without_own_zip
from binlake.spark.runtime.session import defaults_for

INSTALLED = Path(pyspark.__file__).parent
OWN_ZIP = str(INSTALLED / "python" / "lib" / "pyspark.zip")


def _worker_state(batches: Any) -> Any:
    import sys

    import pyarrow as pa
    import pyspark

    state = {
        "pyspark": pyspark.__file__,
        "zips": [p for p in sys.path if p.endswith("pyspark.zip")],
        "preloaded": [
            m
            for m in ("pandas", "binlake.spark.stream_task", "binlake.spark.snapshot_task")
            if m in sys.modules
        ],
    }
    for _ in batches:
        yield pa.RecordBatch.from_pylist([{"state": json.dumps(state)}])


def test_task_workers_import_the_installed_pyspark_with_the_stream_modules_loaded(spark: Any) -> None:
    """Spark puts its pyspark.zip (no compiled files) first on its workers' path; binlake's daemon
    has them import the installed, compiled package, with the stream task's modules imported
    before it forks them."""
    rows = spark.range(1, numPartitions=1).mapInArrow(_worker_state, "state string").collect()
    state = json.loads(rows[0]["state"])
    assert Path(state["pyspark"]).parent == INSTALLED
    assert state["zips"] == []
    assert state["preloaded"] == ["pandas", "binlake.spark.stream_task", "binlake.spark.snapshot_task"]


def test_spark_planning_processes_import_the_installed_pyspark(spark: Any) -> None:
    """The processes Spark starts to plan a query (here the one that asks a Python data source
    for its schema) do not use binlake's daemon: the ``.pth`` file installed with binlake takes
    the zip off their path."""
    from pyspark.sql.datasource import DataSource

    class PlanningState(DataSource):  # local: pickled by value into Spark's process
        @classmethod
        def name(cls) -> str:
            return "binlake_test_planning_state"

        def schema(self) -> str:
            import sys

            import pyspark

            zips = [p for p in sys.path if p.endswith("pyspark.zip")]
            installed = not zips and pyspark.__file__.startswith(str(INSTALLED))
            return "installed int" if installed else "from_zip int"

    spark.dataSource.register(PlanningState)
    assert spark.read.format("binlake_test_planning_state").load().columns == ["installed"]


def _python_path_state(zip_path: str) -> Any:
    env = {**os.environ, "PYTHONPATH": zip_path}
    code = (
        "import json, sys, pyspark\n"
        "print(json.dumps([pyspark.__file__, [p for p in sys.path if p.endswith('pyspark.zip')]]))"
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_python_process_with_the_own_zip_on_its_path_imports_the_installed_package() -> None:
    found, zips = _python_path_state(OWN_ZIP)
    assert Path(found).parent == INSTALLED
    assert OWN_ZIP not in zips
    other = "/opt/spark-4.3.0/python/lib/pyspark.zip"  # a cluster's Spark stays on the path
    assert _python_path_state(other)[1] == [other]


def test_the_daemon_is_used_only_where_the_workers_run_binlakes_environment() -> None:
    daemon = "spark.python.daemon.module"
    assert defaults_for("local[2]")[daemon] == "binlake.spark.runtime.python_daemon"
    assert daemon not in defaults_for("spark://host:7077")  # executors may have binlake in a zip only


def test_only_the_installed_pysparks_own_zip_leaves_the_path() -> None:
    other = "/opt/spark-4.3.0/python/lib/pyspark.zip"  # a cluster's Spark: the JVM's own version
    path = [OWN_ZIP, other, "/some/where", *sys.path]
    assert without_own_zip(path) == [other, "/some/where", *sys.path]
    assert without_own_zip([other, *sys.path]) == [other, *sys.path]


def test_the_preloaded_modules_exist() -> None:
    import importlib.util

    assert all(importlib.util.find_spec(name) is not None for name in PRELOAD)


def test_a_jobs_daemon_imports_its_own_tasks_modules_only() -> None:
    """A snapshot's first chunk does not wait for the stream's modules (nor a stream's batch for
    the snapshot's); a session shared by every job (the tests', a backfill's) imports them all."""
    assert modules_for("snapshot") == (TASK_WORKER, "binlake.spark.snapshot_task")
    assert "binlake.spark.snapshot_task" not in modules_for("stream")
    assert "binlake.spark.stream_task" in modules_for("stream")
    assert modules_for(None) == modules_for("backfill") == PRELOAD
    assert set(modules_for("snapshot")) | set(modules_for("stream")) == set(PRELOAD)
    assert defaults_for("local[2]", "snapshot")[f"spark.executorEnv.{JOB_VARIABLE}"] == "snapshot"
    assert f"spark.executorEnv.{JOB_VARIABLE}" not in defaults_for("local[2]")
    assert defaults_for("spark://host:7077", "snapshot") == defaults_for("spark://host:7077")


PLANNING = """
import json, sys
import binlake.spark.binlog_source, binlake.stream.envelope, binlake.stream.positions
import binlake.stream.schema_changes
print(json.dumps(sorted(m for m in ("pyarrow", "numpy", "pandas", "pyiceberg") if m in sys.modules)))
"""


def test_the_planning_side_imports_no_decoding_or_sink_libraries() -> None:
    """The streaming source's runner, the schema process and read planning import these modules
    at each query's start, one process after another: pyarrow, numpy and pyiceberg cost them
    ~0.8 s, and only executors and the driver's apply use them."""
    done = subprocess.run([sys.executable, "-c", PLANNING], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


SNAPSHOT_TASK = """
import json, sys
import binlake.spark.snapshot_task
print(json.dumps(sorted(m for m in ("binlake.config.pipeline", "sqlglot") if m in sys.modules)))
"""


def test_a_snapshot_task_worker_imports_the_source_config_alone() -> None:
    """The daemon imports the snapshot task's modules before the first task runs, on one core
    while the other waits: the pipeline's other models (0.05 s) and sqlglot (0.13 s, for tables'
    transforms and DDL) are not among them."""
    done = subprocess.run([sys.executable, "-c", SNAPSHOT_TASK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


PRELOADED_TLS = """
import json
from binlake.spark.runtime.preload import modules_for, preload
preload(modules_for("snapshot"))
from binlake.source.server.connection import SourceConnection
print(json.dumps(SourceConnection._preferred is not None))
"""


def test_the_daemon_loads_the_tls_defaults_its_workers_connect_with() -> None:
    """Every task worker's first connection to the source built pymysql's TLS context (the system's
    CA store: 25 ms); the daemon builds it once, before it forks them."""
    done = subprocess.run([sys.executable, "-c", PRELOADED_TLS], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) is True
