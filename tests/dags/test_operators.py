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


SECRET = "Sp4rk-subm1t-s3cret-pw"
SOURCE = {"hostname": "db.internal", "port": 3307, "username": "cdc", "password": SECRET}


@pytest.mark.parametrize(
    ("connection", "kind"),
    [
        ({"conn_type": "spark", "host": "local[2]"}, "local file"),
        ({"conn_type": "spark", "host": "spark://127.0.0.1", "port": 7077}, "local file"),
        ({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "client"}}, "local file"),
        ({"conn_type": "spark", "host": "yarn", "extra": {"deploy-mode": "cluster"}}, "shipped file"),
        (
            {"conn_type": "spark", "host": "k8s://https://k8s:6443", "extra": {"deploy-mode": "cluster"}},
            "secret",
        ),
    ],
)
def test_the_source_password_is_on_no_command_line_and_in_no_environment(
    connection: dict[str, object], kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For every master: the spark-submit command line (what `ps` shows, and YARN's and
    Kubernetes' specs built from it) and the environment spark-submit runs in hold no password;
    the job gets it from a file only its user reads, or from a Kubernetes secret."""
    import os
    import stat

    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from binlake.airflow.source_secret import handoff
    from binlake.config.pipeline_file import source_from_env

    monkeypatch.setenv("AIRFLOW_CONN_SPARK_DEFAULT", json.dumps(connection))
    if kind == "secret":  # the hook needs a Kubernetes client for these: what it would put on the
        # command line is the handoff's conf (as --conf), env (as driverEnv confs) and args
        source = handoff(SOURCE, "k8s://https://k8s", "cluster", "binlake-source:password")
        assert SECRET not in json.dumps([source.conf, source.env, source.args])
        ref = "spark.kubernetes.driver.secretKeyRef.BINLAKE_SOURCE_PASSWORD"
        assert (source.conf, source.path, source.files) == ({ref: "binlake-source:password"}, None, None)
        return
    resolved = SparkSubmitHook()._resolve_connection()
    source = handoff(SOURCE, resolved["master"], resolved.get("deploy_mode"), "binlake-source:password")
    try:
        hook = SparkSubmitHook(
            conf=source.conf, env_vars=source.env, files=source.files,
            application_args=["--config", "p.yaml", "--source-from-env", *source.args],
        )  # fmt: skip
        command = hook._build_spark_submit_command("jobs/stream.py")
        assert SECRET not in " ".join(command)
        assert SECRET not in json.dumps(hook._env or {})
        assert "BINLAKE_SOURCE_PASSWORD" not in source.env
        assert source_from_env(source.env) == {"hostname": "db.internal", "port": "3307", "username": "cdc"}
        assert source.path is not None
        assert json.loads(source.path.read_text()) == {"password": SECRET}
        assert stat.S_IMODE(os.stat(source.path).st_mode) == 0o600
        assert stat.S_IMODE(os.stat(source.path.parent).st_mode) == 0o700
        named = command[command.index("--source-file") + 1]
        if kind == "shipped file":
            assert command[command.index("--files") + 1] == str(source.path)
            assert named == source.path.name  # in the driver's container
        else:
            assert named == str(source.path)
    finally:
        source.remove()
    assert source.path is None or not source.path.exists()


def test_a_kubernetes_cluster_master_without_a_secret_is_refused() -> None:
    from binlake.airflow.source_secret import handoff
    from binlake.errors import ConfigError

    with pytest.raises(ConfigError, match=r"set `airflow\.kubernetes_secret: binlake-source:password`"):
        handoff(SOURCE, "k8s://https://k8s:6443", "cluster", None)
    assert handoff({"hostname": "h"}, "k8s://https://k8s:6443", "cluster", None).conf == {}  # no password


def test_a_job_reads_its_source_settings_from_the_file(tmp_path: Path) -> None:
    from binlake.spark.entry import _source_overrides, job_parser

    path = tmp_path / "source.json"
    path.write_text(json.dumps({"password": SECRET}))
    args = job_parser("stream").parse_args(["--config", "p.yaml", "--source-file", str(path)])
    assert _source_overrides(args) == {"password": SECRET}
