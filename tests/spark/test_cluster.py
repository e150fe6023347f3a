"""binlake's jobs on a Spark standalone cluster (a master and two workers on 127.0.0.1), via
spark-submit: the snapshot, then the stream while a workload writes."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyspark
import pytest

from binlake.config import PipelineConfig
from binlake.sink.catalog import open_catalog
from binlake.sink.exactly_once import BATCH_KEY
from binlake.spark.runtime.package import build
from binlake.testing.private_server import PrivateMariaDB, free_port
from tests.helpers import assert_sink_equals_source, concurrent_writes, pipeline_dict, run_binlake

ROOT = Path(__file__).parents[2]
SPARK_HOME = Path(pyspark.__file__).parent


def _wait_for(check: Callable[[], bool], what: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[str]:
    """A standalone master and two workers from the pyspark wheel's spark-class: tasks run in
    either worker's executor, never in the driver."""
    port, ui = free_port(), free_port()
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_LOCAL_IP": "127.0.0.1",
           "SPARK_LOG_DIR": str(tmp_path / "logs"), "SPARK_WORKER_DIR": str(tmp_path / "work")}  # fmt: skip
    spark_class = str(SPARK_HOME / "bin" / "spark-class")
    master_log = tmp_path / "master.log"
    master = subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
         "--webui-port", str(ui)],
        env=env, stdout=subprocess.DEVNULL, stderr=master_log.open("w"), start_new_session=True,
    )  # fmt: skip
    url = f"spark://127.0.0.1:{port}"
    worker = [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1",
              "--memory", "1g"]  # fmt: skip
    workers = [
        subprocess.Popen(
            [*worker, "--webui-port", str(free_port()), "--work-dir", str(tmp_path / f"work-{i}"), url],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for i in range(2)
    ]
    try:
        _wait_for(lambda: socket.create_connection(("127.0.0.1", port), 1).close() is None, "the master")

        def workers_alive() -> bool:
            # The UI may not get the port asked for (another Spark UI took it meanwhile and Spark
            # moved to the next one): ask the address the master's log says it started at.
            started = re.search(r"MasterWebUI.* started at (http://\S+)", master_log.read_text())
            if started is None:
                return False
            with urllib.request.urlopen(f"{started.group(1)}/json/", timeout=2) as page:
                return int(json.load(page).get("aliveworkers", 0)) == len(workers)

        _wait_for(workers_alive, "the workers to register")
        yield url
    finally:
        for process in (*workers, master):
            process.terminate()
        for process in (*workers, master):
            process.wait(30)


def _submit(cluster: str, package: Path, job: str, *args: str) -> dict[str, Any]:
    """Run a job of ``jobs/`` on the cluster as a user would; its summary (the last line)."""
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip
    submit = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster, "--py-files", str(package),
         "--conf", "spark.executor.memory=1g", "--conf", f"spark.pyspark.python={sys.executable}",
         str(ROOT / "jobs" / job), *args],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert submit.returncode == 0, submit.stderr[-3000:]
    summary: dict[str, Any] = json.loads(submit.stdout.strip().splitlines()[-1])
    return summary


@pytest.mark.slow
def test_snapshot_and_stream_on_a_standalone_cluster(
    cluster: str, mariadb: PrivateMariaDB, database: str, tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, seq FROM seq_1_to_20000",
        database=database,
    )
    raw = pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work", chunk_size=1000)
    # Merge-on-read, every batch merged on the cluster's executors (stream.shares.bucket_merge): their
    # files and keys travel back to the driver from other processes than the driver's.
    raw["sink"] = {"table_properties": {"write.merge.mode": "merge-on-read"}}
    raw["stream"] = {"executor_merge_from": 0}
    path = write_config(raw)
    assert run_binlake("--config", str(path), "plan").returncode == 0
    package = build(tmp_path / "dist" / "binlake.zip")  # what a user ships: `make spark-package`
    summary = _submit(cluster, package, "snapshot.py", "--config", str(path))
    assert summary["complete"]
    assert summary["rows"] == 20000
    config = PipelineConfig.model_validate(raw)
    table = open_catalog(config).load_table(f"{database}.t")
    assert table.scan().to_arrow().num_rows == 20000
    # The stream on the cluster while the application writes on, then once more after it stopped.
    with concurrent_writes(mariadb, database, keys=range(1, 20101)):
        mariadb.execute("UPDATE t SET v = -v WHERE id % 10 = 0", database=database)
        during = _submit(cluster, package, "stream.py", "--config", str(path), "--until-caught-up")
    _submit(cluster, package, "stream.py", "--config", str(path), "--until-caught-up")
    assert during["rows"] >= 2000  # the UPDATE's rows at least, read by the executors
    assert_sink_equals_source(config)
    # Merged in key buckets: a batch's commit adds a data file per bucket that had upserts.
    table.refresh()
    added = [
        int(s.summary.additional_properties.get("added-data-files", "0"))
        for s in table.snapshots()
        if s.summary is not None and BATCH_KEY in s.summary.additional_properties
    ]
    assert max(added) >= 2, added
