"""Gaps heal themselves (``stream.on_gap: backfill``, the default): changes binlake cannot replicate
land mid-stream under a workload — a MINIMAL-image insert without a default binlake can read, an
update logged as a statement, a generated column added to a table with rows — and the run ends with
the sink equal to the source, no command typed. The tables with a gap wait, behind but exact, while
the stream's healer reads their backfills; the other tables never do. A kill -9 after a healing
backfill is staged: the restarted stream applies it."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import plan
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.state.repair_ledger import RepairLedger
from binlake.state.store import StateStore
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload
from tests.dags.conftest import wait_for
from tests.helpers import (
    assert_sink_equals_source,
    in_session,
    kill_9_at,
    run_binlake,
    start_stream_process,
    stream_config,
    write_config_file,
)

pytestmark = pytest.mark.slow


def _gaps(server: PrivateMariaDB, database: str) -> None:
    """Three kinds of change no row event carries whole."""
    in_session(
        server,
        database,
        "SET SESSION binlog_row_image = 'MINIMAL'",
        "INSERT INTO notes (id, v) VALUES (100, 1)",
    )  # `since`: a DATE default binlake cannot read
    in_session(server, database, "SET SESSION binlog_format = 'STATEMENT'",
             "UPDATE customers SET loyalty_points = loyalty_points + 5 WHERE id % 7 = 0")  # fmt: skip
    server.execute("ALTER TABLE notes ADD COLUMN twice INT AS (v * 2) STORED", database=database)


def _repairs(config: PipelineConfig) -> list[Any]:
    with StateStore(config.pipeline.resolved_state_uri) as store:
        return RepairLedger(store, config.pipeline.name).repairs()


def _snapshotted(mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any) -> PipelineConfig:
    demo.load(mariadb.admin_connection, 300, database=database)
    mariadb.execute(
        "CREATE TABLE notes (id INT PRIMARY KEY, since DATE DEFAULT '2024-01-01', v INT)",
        "INSERT INTO notes (id, v) SELECT seq, seq FROM seq_1_to_50",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=200,
                           chunk_key_columns={f"{database}.page_views": "customer_id"})  # fmt: skip
    plan(config)
    assert run_snapshot(config, spark).complete
    return config


def test_gaps_mid_stream_heal_without_an_operator(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _snapshotted(mariadb, database, tmp_path, spark)
    workload = Workload(mariadb.admin_connection, database=database, rate=60, txn_size=2).start()
    stop = threading.Event()
    batches = threading.Semaphore(0)
    errors: list[BaseException] = []

    def stream() -> None:
        try:
            run_stream(config, spark, stop=stop, progress=lambda _b, _r: batches.release())
        except BaseException as e:
            errors.append(e)

    thread = threading.Thread(target=stream)
    thread.start()
    try:
        assert batches.acquire(timeout=300)
        _gaps(mariadb, database)
        healed = wait_for(  # while the stream runs: nobody typed a command
            "the gaps to heal",
            lambda: errors or (len(r := _repairs(config)) >= 2 and all(x.status == "closed" for x in r)),
            timeout=400,
        )
        assert not errors, errors
        assert healed
    finally:
        workload.stop()
        stop.set()
        thread.join(600)
    assert not errors, errors
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    repairs = _repairs(config)
    assert {r.table for r in repairs} == {TableId(database, "notes"), TableId(database, "customers")}
    assert all(r.backfill_id.startswith("heal-") and r.status == "closed" for r in repairs)


def test_a_kill_9_after_a_healing_backfill_is_staged(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    config = _snapshotted(mariadb, database, tmp_path, spark)
    _gaps(mariadb, database)
    mariadb.execute("UPDATE notes SET v = v + 1 WHERE id <= 10", database=database)
    path = write_config_file(tmp_path, config, mariadb)
    kill_9_at(path, "heal-staged")
    assert any(r.status == "open" for r in _repairs(config))  # staged, not applied
    status = run_binlake("--config", str(path), "status").stdout
    assert f"held: {database}.notes since binlog." in status, status
    assert "healing: the stream reads backfill heal-" in status
    run_stream(config, spark, until_caught_up=True)  # a restart: applies what was staged
    assert_sink_equals_source(config)
    assert all(r.status == "closed" for r in _repairs(config))


def test_a_stop_ends_with_binlakes_words_not_sparks_plan(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)", "INSERT INTO t VALUES (1, 1)", database=database
    )
    config = stream_config(mariadb, database, tmp_path, {"on_gap": "stop"})
    plan(config)
    assert run_snapshot(config, spark).complete
    in_session(mariadb, database, "SET SESSION binlog_format = 'STATEMENT'", "UPDATE t SET v = 2")
    job = start_stream_process(write_config_file(tmp_path, config, mariadb), None)
    _, err = job.communicate(timeout=300)
    text = err.decode()
    (tmp_path / "stderr.txt").write_text(text)
    assert job.returncode not in (0, None)
    lines = [line for line in text.splitlines() if line.strip()]
    tail = "\n".join(lines[-8:])
    assert "binlog_format" in tail, tail
    assert "binlake backfill --table" in tail, tail
    for spark_text in (
        "=== Streaming Query ===",
        "Logical Plan",
        "Traceback",
        "MicroBatchExecution",
        "\tat ",
    ):
        assert spark_text not in text, text[-3000:]
