"""One writer per pipeline, with real processes: a second snapshot is refused naming the first; a
stream paused past its lease (SIGSTOP) is taken over by another and, resumed (SIGCONT), can never
commit again; the sink equals the source after both."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import plan
from binlake.sink.catalog import catalog_properties, open_catalog, sink_name
from binlake.sink.fenced_commits import epoch_key
from binlake.spark.snapshot_job import run_snapshot
from binlake.state.leases import Command
from binlake.state.store import StateStore
from binlake.state.writers import WriterLease
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import (
    BIN,
    ROOT,
    assert_sink_equals_source,
    concurrent_writes,
    config_dict,
    pipeline_dict,
    run_binlake,
    start_snapshot_process,
    start_stream_process,
    stream_config,
    write_config_file,
)


def _live_writer(config: PipelineConfig, command: str, pid: int, job: subprocess.Popen[Any]) -> WriterLease:
    """Wait until process ``pid`` is the pipeline's writer for ``command``."""
    writers = StateStore(config.pipeline.resolved_state_uri).writers(config.pipeline.name)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert job.poll() is None, job.stderr.read().decode() if job.stderr else ""
        lease = writers.current(command)
        if lease is not None and lease.holder.pid == pid:
            return lease
        time.sleep(0.1)
    raise AssertionError(f"{command} never became the writer")


@pytest.mark.slow
def test_a_second_snapshot_is_refused_naming_the_first(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(30))",
        "INSERT INTO t SELECT seq, REPEAT('x', seq % 30) FROM seq_1_to_6000",
        database=database,
    )
    raw = pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work", chunk_size=300)
    raw["pipeline"]["parallelism"] = 1
    raw["source"]["startup_mode"] = "snapshot"
    path = write_config(raw)
    config = PipelineConfig.model_validate(raw)
    assert run_binlake("--config", str(path), "plan").returncode == 0
    first = start_snapshot_process(path)
    lease = _live_writer(config, Command.SNAPSHOT, first.pid, first)
    os.killpg(first.pid, signal.SIGSTOP)  # it holds its lease, and cannot finish meanwhile
    try:
        second = run_binlake("--config", str(path), "snapshot", timeout=300)
    finally:
        os.killpg(first.pid, signal.SIGCONT)
    assert second.returncode == 3, second.output
    last = second.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "binlake snapshot: error: Pipeline `test` already has a writer for `binlake snapshot`"
    )
    assert f"(pid {first.pid} on {socket.gethostname()} since {lease.since:%Y-%m-%d %H:%M:%S} UTC)" in last
    assert "Fix: wait for it to finish, or stop it" in last
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err.decode()
    assert json.loads(out.decode().strip().splitlines()[-1])["complete"]
    assert_sink_equals_source(config)


def _sqlite_files(config: PipelineConfig) -> list[Path]:
    """The SQLite files the pipeline writes: its state store and its catalog."""
    uris = [config.pipeline.resolved_state_uri, str(catalog_properties(config).get("uri", ""))]
    return [Path(u.split("sqlite:///", 1)[1]) for u in uris if u.startswith("sqlite:///")]


def _stop_between_writes(pid: int, databases: list[Path]) -> None:
    """SIGSTOP the process group while it holds no lock on these SQLite files. A process frozen
    inside a transaction keeps every other writer of the file out until it runs again (SQLite's own
    lock, whatever binlake's lease says) — not the case this test is about: a writer paused between
    its writes, whose lease runs out."""
    for _ in range(400):
        os.killpg(pid, signal.SIGSTOP)
        if not any(_locked(db) for db in databases):
            return
        os.killpg(pid, signal.SIGCONT)
        time.sleep(0.05)
    raise AssertionError(f"the stream held a lock on {databases} at every pause")


def _locked(database: Path) -> bool:
    conn = sqlite3.connect(database, timeout=0)
    try:
        conn.execute("BEGIN EXCLUSIVE")  # fails while any other connection reads or writes it
        conn.rollback()
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        conn.close()


@pytest.mark.slow
def test_a_stream_paused_past_its_lease_and_taken_over_never_commits_again(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, 0 FROM seq_1_to_400",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=300)
    raw = config_dict(config)
    raw["pipeline"]["writer_lease_s"] = 3
    config = PipelineConfig.model_validate(raw)
    path = write_config_file(tmp_path, config, mariadb)
    plan(config)
    assert run_snapshot(config, spark).complete
    store = StateStore(config.pipeline.resolved_state_uri)
    identifier = sink_name(config, TableId(database, "t"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "include")}
    with concurrent_writes(mariadb, database, keys=range(1, 600)):
        paused = subprocess.Popen(
            [str(BIN / "binlake"), "--config", str(path), "stream"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True,
        )  # fmt: skip
        old = _live_writer(config, Command.STREAM, paused.pid, paused)
        deadline = time.monotonic() + 300
        while not store.stream_history("test").batches() and time.monotonic() < deadline:
            assert paused.poll() is None, paused.stderr.read().decode() if paused.stderr else ""
            time.sleep(0.2)
        _stop_between_writes(paused.pid, _sqlite_files(config))
        try:
            time.sleep(config.pipeline.writer_lease_s + 1.5)  # its lease expires: it is not renewed
            taker = start_stream_process(path, None)
            out, err = taker.communicate(timeout=300)
            assert taker.returncode == 0, err.decode()
            assert json.loads(out.decode().strip().splitlines()[-1])["batches"] >= 1
        finally:
            os.killpg(paused.pid, signal.SIGCONT)
    new = store.writers("test").current(Command.STREAM)
    assert new is not None
    assert new.epoch > old.epoch
    _, err_b = paused.communicate(timeout=300)
    assert paused.returncode != 0  # it stopped by itself
    last = err_b.decode().strip().splitlines()[-1]
    assert "lost its writer lease" in last or "may no longer commit" in last, err_b.decode()[-3000:]
    # Nothing of the paused writer reached the table after the one that took over.
    table = open_catalog(config).load_table(identifier)
    assert int(table.properties[epoch_key(Command.STREAM)]) == new.epoch
    rerun = start_stream_process(path, None)
    _, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()
    assert_sink_equals_source(config)
