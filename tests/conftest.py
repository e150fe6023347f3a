"""Shared fixtures: private MariaDB servers, a unique database per test, configs, the CLI.

Every test that needs a database gets a real one: a private MariaDB started once per test
session (binlog ROW/FULL/FULL metadata), and a database of its own on it, dropped afterwards.
Servers with other settings (binlog off, STATEMENT, MINIMAL) are started on first use and shared.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import CliResult, run_binlake

# Spark's Python workers must run this interpreter (the venv's), whatever the shell says.
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


@pytest.fixture(scope="session")
def mariadb() -> Iterator[PrivateMariaDB]:
    """The session's private MariaDB with the binlog settings binlake needs."""
    server = PrivateMariaDB(max_binlog_size=16 * 1024 * 1024)
    server.start()
    yield server
    server.remove()


ServerFactory = Callable[..., PrivateMariaDB]


@pytest.fixture(scope="session")
def mariadb_factory() -> Iterator[ServerFactory]:
    """Start (once per distinct option set) a private server with other options.

    ``mariadb_factory(**{"log-bin": None})`` has no binlog;
    ``mariadb_factory(**{"binlog-format": "STATEMENT"})`` logs statements.
    """
    servers: dict[tuple[tuple[str, str | None], ...], PrivateMariaDB] = {}

    def start(**options: str | None) -> PrivateMariaDB:
        key = tuple(sorted(options.items()))
        if key not in servers:
            servers[key] = PrivateMariaDB(options=options).start()
        return servers[key]

    yield start
    for server in servers.values():
        server.remove()


def _unique_name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower()).strip("_")[:40]
    return f"t_{base}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def database(request: pytest.FixtureRequest, mariadb: PrivateMariaDB) -> Iterator[str]:
    """A database of this test's own on the session server, dropped afterwards."""
    name = _unique_name(request)
    mariadb.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    mariadb.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def binlake_cli() -> Callable[..., CliResult]:
    return run_binlake


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[..., Path]:
    """Write a config dict (or YAML text) to a file in the test's folder and return its path."""
    counter = iter(range(1000))

    def write(config: dict[str, Any] | str) -> Path:
        path = tmp_path / f"pipeline_{next(counter)}.yaml"
        text = config if isinstance(config, str) else yaml.safe_dump(config, allow_unicode=True)
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture(scope="session", autouse=True)
def pyiceberg_as_jobs_run_it() -> None:
    """Tests run the package as binlake's jobs do: with its one patch of pyiceberg installed
    (``sink/pyiceberg_internals.cache_immutable_files``, by name at a job's start)."""
    from binlake.sink.pyiceberg_internals import cache_immutable_files

    cache_immutable_files()


@pytest.fixture(autouse=True)
def logging_as_it_was() -> Iterator[None]:
    """A test that runs a command in-process at ``--log-level DEBUG`` leaves the levels it set to
    itself: later tests of the worker (Spark's py4j traffic above all) log as before."""
    import logging

    names = ["", "py4j", "py4j.clientserver"]
    levels = {n: logging.getLogger(n).level for n in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """The test session's one Spark session, ``local[2]`` from the pyspark wheel, with the settings
    binlake's jobs run with."""
    from pyspark.sql import SparkSession

    from binlake.spark.runtime.jvm_archive import with_archive
    from binlake.spark.runtime.session import defaults_for, with_forkserver

    session = (
        SparkSession.builder.master("local[2]")
        .config(map=with_forkserver(with_archive(defaults_for("local[2]")), None))
        .appName("binlake-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    yield session
    session.stop()
