"""The driver JVM's class archive: used when there, harmless when missing, stale or broken."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from binlake.spark import jvm_archive
from binlake.spark.jvm_archive import VARIABLE, driver_java_options


def test_options_name_the_archive_when_it_exists_and_keep_the_users_last(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive = tmp_path / "spark.jsa"
    monkeypatch.setenv(VARIABLE, str(archive))
    assert driver_java_options() is None
    assert driver_java_options("-Xss4m") == "-Xss4m"
    archive.write_bytes(b"x")
    options = driver_java_options("-Xss4m")
    assert options is not None
    assert options.startswith(f"-XX:SharedArchiveFile={archive} ")
    assert options.endswith(" -Xss4m")  # the user's options come last: they win
    monkeypatch.setenv(VARIABLE, "")
    assert jvm_archive.archive_path() is None
    assert driver_java_options("-Xss4m") == "-Xss4m"


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
