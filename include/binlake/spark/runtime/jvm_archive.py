"""A class-data sharing archive for the Spark driver's JVM: binlake's jobs start seconds sooner.

Every binlake job (an Airflow task, a ``binlake stream`` restart) starts a Spark driver JVM that
loads and verifies some 10,000 classes before it runs anything; on a 2-core machine that is most
of the 10-12 s a session takes to start. A dynamic CDS archive (JDK 13+) holds those classes
already parsed and verified, so the JVM maps them instead: the session starts in about half the
time. ``make setup`` builds the archive once per environment by running a small Spark workload
that loads the classes binlake's jobs use (SQL, Arrow, Python data sources, a streaming query).

The archive is only a cache: a JVM that cannot use it (another Java, another classpath, a missing
file on a cluster's driver host) starts the slow way, silently (the ``-Xlog`` options below).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from importlib.metadata import version
from pathlib import Path

#: Overrides where the archive is (built and used); empty turns it off.
VARIABLE = "BINLAKE_JVM_ARCHIVE"
#: A JVM that cannot map the archive warns on stdout, where jobs print their JSON summary.
QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"
DRIVER_OPTIONS = "spark.driver.extraJavaOptions"


def archive_path() -> Path | None:
    """Where this environment's archive is: one per pyspark version (its jars are the classpath)
    and training workload (``jvm_training.py``: what it runs is what the archive holds, so a
    change to it builds a new archive at the next ``make setup``)."""
    configured = os.environ.get(VARIABLE)
    if configured is not None:
        return Path(configured) if configured else None
    training = hashlib.sha256(Path(__file__).with_name("jvm_training.py").read_bytes()).hexdigest()[:8]
    return Path(sys.prefix) / "share" / "binlake" / f"spark-{version('pyspark')}-{training}.jsa"


def with_archive(conf: Mapping[str, str]) -> dict[str, str]:
    """Spark ``conf`` with the archive added to ``spark.driver.extraJavaOptions``, before the
    options already there (the user's, which so win); unchanged when there is no archive."""
    result = dict(conf)
    path = archive_path()
    if path is not None and path.is_file():
        ours = f"-XX:SharedArchiveFile={path} {QUIET}"
        existing = result.get(DRIVER_OPTIONS)
        result[DRIVER_OPTIONS] = f"{ours} {existing}" if existing else ours
    return result


def build(path: Path) -> None:
    """Run the training workload in a fresh driver JVM that writes the archive when it exits,
    then move it into place (a half-written archive is never at ``path``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as work:
        staged = Path(work) / path.name
        env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
        options = f"-XX:ArchiveClassesAtExit={staged} {QUIET}"
        done = subprocess.run(
            [sys.executable, "-m", "binlake.spark.runtime.jvm_training", options, work],
            env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0 or not staged.is_file():
            raise RuntimeError(
                f"building the Spark JVM archive at {path} failed (exit {done.returncode}); binlake "
                f"works without it, only its jobs start slower. Output:\n{done.stderr[-2000:]}"
            )
        os.replace(staged, path)


def remove_stale(path: Path) -> list[Path]:
    """Remove the archives of other pyspark versions or trainings next to ``path`` (no JVM of this
    environment maps them any more; ~170 MB each, left by an upgrade); returns them."""
    stale = [old for old in path.parent.glob("spark-*.jsa") if old != path]
    for old in stale:
        old.unlink(missing_ok=True)
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m binlake.spark.runtime.jvm_archive", description=__doc__)
    parser.add_argument("--if-missing", action="store_true", help="do nothing when the archive exists")
    args = parser.parse_args(argv)
    path = archive_path()
    if path is None:
        print(f"{VARIABLE} is empty: no JVM archive")
        return 0
    if args.if_missing and path.is_file():
        return 0
    try:
        build(path)
    except (RuntimeError, OSError) as e:
        print(f"warning: {e}", file=sys.stderr)  # a cache: set-up goes on without it
        return 0
    print(f"Spark JVM archive: {path} ({path.stat().st_size // 1024} KiB)")
    if os.environ.get(VARIABLE) is None:  # binlake's own folder (a path of the user's is theirs)
        for old in remove_stale(path):
            print(f"removed the archive of another pyspark version or training: {old}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
