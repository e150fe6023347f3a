"""The fork server: Spark's Python daemon forked from a process that did its imports while the JVM
started (``spark/runtime/forkserver.py``).

Each test plays Spark's part with real processes: it starts binlake's daemon as Spark does
(``python -m binlake.spark.runtime.python_daemon pyspark.worker``, Spark's variables in its
environment), reads the daemon's port from its standard output, and asks it for a worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from binlake.spark.runtime import forkserver
from binlake.spark.runtime.session import FORKSERVER_SETTING, defaults_for, wants_forkserver

DAEMON = [sys.executable, "-m", "binlake.spark.runtime.python_daemon", "pyspark.worker"]


@pytest.fixture
def server() -> Iterator[forkserver.ForkServer]:
    started = forkserver.start("snapshot", {})
    assert started is not None
    yield started
    started.close()


class Daemon:
    """binlake's daemon as Spark starts it: ``process`` is what Spark holds."""

    def __init__(self, address: str | None, log: Path, **env: str) -> None:
        variables = {
            **os.environ,
            **forkserver.spark_values({}),
            "PYTHON_WORKER_FACTORY_SECRET": "s3cret",
            "SPARK_REUSE_WORKER": "1",
            **env,
        }
        variables.pop(forkserver.ADDRESS_VARIABLE, None)
        if address is not None:
            variables[forkserver.ADDRESS_VARIABLE] = address
        self.log = log
        self.process = subprocess.Popen(
            DAEMON, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log.open("wb"), env=variables
        )
        assert self.process.stdout is not None
        port = self.process.stdout.read(4)
        assert len(port) == 4, f"no port from the daemon; it said: {log.read_text()}"
        self.port = struct.unpack("!i", port)[0]

    def worker(self) -> int:
        """Ask for a worker as Spark does; its pid (the worker then ends with the closed socket)."""
        with self.connected() as (_, pid):
            return pid

    @contextlib.contextmanager
    def connected(self) -> Iterator[tuple[socket.socket, int]]:
        """A worker's connection, as Spark holds it while the worker runs, and the worker's pid."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as conn:
            yield conn, struct.unpack("!i", conn.recv(4))[0]

    def stop(self) -> None:
        """How Spark ends: its end of the daemon's standard input closes."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)


def _authenticate(conn: socket.socket) -> None:
    secret = b"s3cret"
    conn.sendall(struct.pack("!i", len(secret)) + secret)
    assert conn.recv(6) == struct.pack("!i", 2) + b"ok"


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _command(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")


def _gone(pid: int, timeout: float = 30) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                return True  # ended; its new parent has not reaped it yet
        except (FileNotFoundError, ProcessLookupError):  # reaped between the open and the read
            return True
        time.sleep(0.05)
    return False


def test_the_daemon_spark_starts_is_the_servers_child_and_ends_with_spark(
    server: forkserver.ForkServer, tmp_path: Path
) -> None:
    daemon = Daemon(server.address, tmp_path / "daemon.log")
    worker = daemon.worker()
    forked_by = _parent(worker)
    assert forked_by != daemon.process.pid
    assert _parent(forked_by) == server.process.pid, "the daemon is not the server's child"
    daemon.stop()
    assert daemon.process.returncode == 0
    assert _gone(forked_by), "the server's child outlived Spark"
    assert server.process.poll() is None


def test_every_daemon_of_a_session_is_served(server: forkserver.ForkServer, tmp_path: Path) -> None:
    """A session starts a daemon per kind of Python task (an RDD's, a query's), and again when one
    dies: each is the server's child."""
    daemons = [Daemon(server.address, tmp_path / f"daemon{i}.log") for i in range(2)]
    parents = {_parent(_parent(d.worker())) for d in daemons}
    assert parents == {server.process.pid}
    for daemon in daemons:
        daemon.stop()


def test_a_daemon_spark_stops_by_a_signal_stops_with_its_workers(
    server: forkserver.ForkServer, tmp_path: Path
) -> None:
    """Spark stops its daemon by signalling the process it started (``Process.destroy``)."""
    daemon = Daemon(server.address, tmp_path / "daemon.log")
    with daemon.connected() as (conn, worker):
        forked_by = _parent(worker)
        _authenticate(conn)  # the worker is past its start (where it ignores the daemon's signal)
        daemon.process.send_signal(signal.SIGTERM)
        daemon.process.wait(timeout=30)
        assert _gone(forked_by), "the daemon outlived the process Spark started"
        assert _gone(worker), "a worker outlived its daemon"


def test_spark_asking_the_daemon_to_kill_a_worker_reaches_the_servers_child(
    server: forkserver.ForkServer, tmp_path: Path
) -> None:
    """Spark writes a worker's pid to the daemon's standard input to have it killed."""
    daemon = Daemon(server.address, tmp_path / "daemon.log")
    with daemon.connected() as (_, worker):
        assert daemon.process.stdin is not None
        daemon.process.stdin.write(struct.pack("!i", worker))
        daemon.process.stdin.flush()
        assert _gone(worker), "the worker Spark asked to kill lives on"
    daemon.stop()


@pytest.mark.parametrize(
    "env",
    [{"PYTHONHASHSEED": "1"}, {"OMP_NUM_THREADS": "7"}],
    ids=["another hash seed", "another thread count"],
)
def test_a_daemon_whose_start_differs_from_the_servers_imports_on_its_own(
    server: forkserver.ForkServer, tmp_path: Path, env: dict[str, str]
) -> None:
    daemon = Daemon(server.address, tmp_path / "daemon.log", **env)
    assert _parent(daemon.worker()) == daemon.process.pid
    daemon.stop()


def test_a_daemon_without_its_server_imports_on_its_own(tmp_path: Path) -> None:
    daemon = Daemon(str(tmp_path / "no-server"), tmp_path / "daemon.log")
    assert _parent(daemon.worker()) == daemon.process.pid
    daemon.stop()


def test_a_closed_server_ends_and_its_daemons_live_on(server: forkserver.ForkServer, tmp_path: Path) -> None:
    daemon = Daemon(server.address, tmp_path / "daemon.log")
    forked_by = _parent(daemon.worker())
    server.close()
    assert server.process.returncode == 0
    assert not Path(server.address).parent.exists()
    assert _parent(daemon.worker()) == forked_by
    daemon.stop()
    assert _gone(forked_by)


def _parent_command(rows: Any) -> Any:
    for _ in rows:
        yield _command(os.getppid())


def test_the_test_sessions_task_workers_come_from_the_fork_server(spark: Any) -> None:
    """The session's daemon was the server's child, as in binlake's jobs on a local master (the
    test session starts its server as ``spark_session`` does)."""
    commands = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(_parent_command).collect()
    assert all("binlake.spark.runtime.forkserver" in c for c in commands), commands


def test_a_local_session_gets_a_server_unless_its_pipeline_turns_it_off() -> None:
    assert wants_forkserver(defaults_for("local[2]", "snapshot"))
    assert not wants_forkserver({**defaults_for("local[2]"), FORKSERVER_SETTING: "false"})
    assert not wants_forkserver(defaults_for("spark://cluster:7077"))  # no binlake daemon there
