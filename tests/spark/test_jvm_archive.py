"""The driver JVM's class archive: used when there, harmless when missing, stale or broken."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from importlib.metadata import version
from pathlib import Path

import pytest

from binlake.config.pipeline_file import parse_config
from binlake.spark.runtime import jvm_archive
from binlake.spark.runtime.jvm_archive import DRIVER_OPTIONS, VARIABLE, with_archive
from binlake.spark.runtime.session import LOCAL_JIT, session_conf, with_local_jit


def test_the_archive_goes_first_into_the_drivers_options_when_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "spark.jsa"
    monkeypatch.setenv(VARIABLE, str(archive))
    assert with_archive({}) == {}
    users = {DRIVER_OPTIONS: "-Xss4m", "spark.executor.cores": "2"}
    assert with_archive(users) == users
    archive.write_bytes(b"x")
    options = with_archive(users)[DRIVER_OPTIONS]
    assert options == f"-XX:SharedArchiveFile={archive} {jvm_archive.QUIET} -Xss4m"  # the user's win
    assert with_archive({})[DRIVER_OPTIONS] == f"-XX:SharedArchiveFile={archive} {jvm_archive.QUIET}"
    assert users[DRIVER_OPTIONS] == "-Xss4m"  # the caller's conf is left as it was
    monkeypatch.setenv(VARIABLE, "")
    assert jvm_archive.archive_path() is None
    assert with_archive(users) == users


def test_a_local_job_jvm_compiles_with_the_first_tier_unless_the_user_says_otherwise() -> None:
    assert with_local_jit({}) == {DRIVER_OPTIONS: LOCAL_JIT}
    users = {DRIVER_OPTIONS: "-XX:TieredStopAtLevel=4"}
    assert with_local_jit(users)[DRIVER_OPTIONS] == f"{LOCAL_JIT} -XX:TieredStopAtLevel=4"  # the user's win


def _pipeline(master: str, options: str | None = None) -> str:
    conf = f"\n    conf: {{spark.driver.extraJavaOptions: '{options}'}}" if options else ""
    return f"""
pipeline:
  name: p
  spark:
    master: '{master}'{conf}
source: {{hostname: h, username: u, password: pw, tables: ['d\\..*']}}
"""


def test_only_a_local_snapshots_or_streams_session_gets_the_first_tier_jit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(VARIABLE, "")  # no class archive: the driver's options are the JIT's alone
    local = parse_config(_pipeline("local[2]"), "p.yaml", {})
    assert session_conf(local, "snapshot")[DRIVER_OPTIONS] == LOCAL_JIT
    assert session_conf(local, "stream")[DRIVER_OPTIONS] == LOCAL_JIT
    assert DRIVER_OPTIONS not in session_conf(local, "backfill")  # not measured with it: full JIT
    assert DRIVER_OPTIONS not in session_conf(local, "snapshot", submitted=True)  # spark-submit's JVM
    cluster = parse_config(_pipeline("spark://spark:7077"), "p.yaml", {})
    assert DRIVER_OPTIONS not in session_conf(cluster, "snapshot")
    users = parse_config(_pipeline("local[2]", "-XX:TieredStopAtLevel=4"), "p.yaml", {})
    assert session_conf(users, "snapshot")[DRIVER_OPTIONS] == f"{LOCAL_JIT} -XX:TieredStopAtLevel=4"


@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java")
def test_a_jvm_given_a_broken_archive_starts_and_prints_nothing(tmp_path: Path) -> None:
    broken = tmp_path / "broken.jsa"
    broken.write_bytes(b"not an archive")
    for archive in (broken, tmp_path / "missing.jsa"):
        options = f"-XX:SharedArchiveFile={archive} {jvm_archive.QUIET}".split()
        done = subprocess.run(["java", *options, "-version"], capture_output=True, text=True, check=False)
        assert done.returncode == 0
        assert done.stdout == ""  # jobs print their JSON summary on stdout
        assert "archive" not in done.stderr.lower()


def test_archives_of_other_pyspark_versions_are_removed(tmp_path: Path) -> None:
    current = tmp_path / "spark-4.3.0.jsa"
    for name in ("spark-4.2.1.jsa", "spark-4.3.0.jsa", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    assert jvm_archive.remove_stale(current) == [tmp_path / "spark-4.2.1.jsa"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "spark-4.3.0.jsa"]


def test_an_archive_is_named_after_its_pyspark_and_its_training(monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed training workload (a job binlake added) builds a new archive at the next set-up
    instead of keeping one without that job's classes."""
    monkeypatch.delenv(jvm_archive.VARIABLE, raising=False)
    path = jvm_archive.archive_path()
    assert path is not None
    training = Path(jvm_archive.__file__).with_name("jvm_training.py").read_bytes()
    assert path.name == f"spark-{version('pyspark')}-{hashlib.sha256(training).hexdigest()[:8]}.jsa"
