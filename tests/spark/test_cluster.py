"""The snapshot job on a Spark standalone cluster (master and worker on 127.0.0.1), via spark-submit."""

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

import pyspark
import pytest

from binlake.config import PipelineConfig
from binlake.sink.catalog import open_catalog
from binlake.spark.package import build
from binlake.testing.private_server import PrivateMariaDB, free_port
from tests.helpers import pipeline_dict, run_binlake

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
    """A standalone master and one worker from the pyspark wheel's spark-class."""
    port, ui, worker_ui = free_port(), free_port(), free_port()
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
    worker = subprocess.Popen(
        [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--webui-port",
         str(worker_ui), "--cores", "2", "--memory", "2g", url],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(lambda: socket.create_connection(("127.0.0.1", port), 1).close() is None, "the master")

        def worker_alive() -> bool:
            # The UI may not get the port asked for (another Spark UI took it meanwhile and Spark
            # moved to the next one): ask the address the master's log says it started at.
            started = re.search(r"MasterWebUI.* started at (http://\S+)", master_log.read_text())
            if started is None:
                return False
            with urllib.request.urlopen(f"{started.group(1)}/json/", timeout=2) as page:
                return bool(json.load(page).get("aliveworkers"))

        _wait_for(worker_alive, "the worker to register")
        yield url
    finally:
        for process in (worker, master):
            process.terminate()
        for process in (worker, master):
            process.wait(30)


@pytest.mark.slow
def test_snapshot_on_a_standalone_cluster(
    cluster: str, mariadb: PrivateMariaDB, database: str, tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))",
        "INSERT INTO t SELECT seq, CONCAT('row ', seq) FROM seq_1_to_20000",
        database=database,
    )
    raw = pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work", chunk_size=1000)
    path = write_config(raw)
    assert run_binlake("--config", str(path), "plan").returncode == 0
    package = build(tmp_path / "dist" / "binlake.zip")  # what a user ships: `make spark-package`
    env = {**os.environ, "SPARK_HOME": str(SPARK_HOME), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}  # fmt: skip
    submit = subprocess.run(
        [str(SPARK_HOME / "bin" / "spark-submit"), "--master", cluster, "--py-files", str(package),
         "--conf", "spark.executor.memory=1g", "--conf", f"spark.pyspark.python={sys.executable}",
         str(ROOT / "jobs" / "snapshot.py"), "--config", str(path)],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert submit.returncode == 0, submit.stderr[-3000:]
    summary = json.loads(submit.stdout.strip().splitlines()[-1])
    assert summary["complete"]
    assert summary["rows"] == 20000
    config = PipelineConfig.model_validate(raw)
    table = open_catalog(config).load_table(f"{database}.t")
    assert table.scan().to_arrow().num_rows == 20000
