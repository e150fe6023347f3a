"""What binlake's spark-submit operator hands spark-submit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from binlake.airflow.operators import submit_conf
from binlake.spark.runtime.jvm_archive import DRIVER_OPTIONS, QUIET, VARIABLE


def test_spark_submit_gets_the_pipelines_spark_conf_and_the_jvm_archive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"x")
    monkeypatch.setenv(VARIABLE, str(archive))
    pipeline = {"spark.driver.memory": "3g", "spark.executor.cores": "2", DRIVER_OPTIONS: "-Xss4m"}
    conf = submit_conf(pipeline, {"spark.driver.memory": "4g"})
    assert conf["spark.driver.memory"] == "4g"  # the operator's own conf wins over the YAML
    assert conf["spark.executor.cores"] == "2"
    assert conf[DRIVER_OPTIONS] == f"-XX:SharedArchiveFile={archive} {QUIET} -Xss4m"  # the user's last

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps({"conn_type": "spark", "host": "local[2]"}))
    command = SparkSubmitHook(conf=conf)._build_spark_submit_command("jobs/stream.py")
    assert "spark.driver.memory=4g" in command
    assert f"{DRIVER_OPTIONS}={conf[DRIVER_OPTIONS]}" in command  # one argument, spaces and all

    monkeypatch.setenv(VARIABLE, "")
    assert submit_conf({}, None) == {}
    # On a local master the workers run binlake's interpreter: binlake's Python daemon, unless the
    # pipeline says otherwise; not on a cluster (its executors may have binlake in a zip only).
    daemon = "spark.python.daemon.module"
    assert submit_conf({}, None, "local[2]") == {daemon: "binlake.spark.runtime.python_daemon"}
    assert submit_conf({daemon: "pyspark.daemon"}, None, "local[*]") == {daemon: "pyspark.daemon"}
    assert submit_conf({}, None, "spark://host:7077") == {}
