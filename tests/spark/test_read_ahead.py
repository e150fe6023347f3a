"""The next batch read ahead while the driver applies one (``spark/read_ahead.py``): used only when
Spark's batch is exactly the range read, never across a statement, and the sink stays exact."""

from __future__ import annotations

import json
import logging
import os
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from binlake.offsets import BinlogOffset
from binlake.spark.read_ahead import Foreseen, ReadAhead, planned_end
from binlake.spark.stream_job import run_stream
from binlake.state.offset_names import STREAM
from binlake.state.store import StateStore
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import (
    assert_sink_equals_source,
    kill_9_at,
    start_stream_process,
    stream_config,
    write_config_file,
)

READ_AHEAD_LOG = "read ahead, while the driver applied the batch before"


def _backlog(server: PrivateMariaDB, database: str, transactions: int, first: int = 0) -> None:
    """``transactions`` of ~3 KB of binlog each: inserts, then updates and deletes of some."""
    for i in range(first, first + transactions):
        server.execute(
            f"INSERT INTO t (id, v) SELECT seq + {i * 10}, REPEAT('x', 150) FROM seq_1_to_10",
            f"UPDATE t SET v = 'u{i}' WHERE id = {i * 10 + 1}",
            f"DELETE FROM t WHERE id = {i * 10 + 2}",
            database=database,
        )


def test_a_backlog_is_read_ahead_and_never_across_a_schema_change(
    mariadb: PrivateMariaDB, tmp_path: Path, spark: Any, caplog: pytest.LogCaptureFixture
) -> None:
    database = f"ahead_{os.getpid()}"
    mariadb.execute(f"CREATE DATABASE `{database}`")
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))", database=database)
    budget = {"max_bytes_per_batch": 8000, "segment_bytes": 2048}
    config = stream_config(mariadb, database, tmp_path, startup_mode="latest-offset", stream=budget)
    run_stream(config, spark, until_caught_up=True)  # nothing yet: records where it starts
    _backlog(mariadb, database, 12)
    # Rows after the change decode with the new column: a batch read ahead across it would decode
    # them with the old schema.
    mariadb.execute("ALTER TABLE t ADD COLUMN n INT NOT NULL DEFAULT 7", database=database)
    _backlog(mariadb, database, 12, first=12)
    mariadb.execute("UPDATE t SET n = id WHERE id % 3 = 0", database=database)
    with caplog.at_level(logging.INFO, logger="binlake.spark.read_ahead"):
        report = run_stream(config, spark, until_caught_up=True)
    used = [r for r in caplog.records if r.getMessage().endswith(READ_AHEAD_LOG)]
    assert report.batches >= 6
    assert len(used) >= 3  # most batches of the backlog came read ahead
    assert not [r for r in caplog.records if "as usual" in r.getMessage()]  # foreseen right each time
    assert_sink_equals_source(config)
    # Spark's offsets log, as the read-ahead reads it: the last batch ends where the stream did.
    (offsets,) = (config.checkpoint_root / "test").glob("*/offsets")
    last = max(int(p.name) for p in offsets.iterdir() if p.name.isdigit())
    assert planned_end(offsets.parent, last) == report.end


@pytest.mark.slow
def test_kill_9_while_reading_ahead_and_at_a_batch_read_ahead_then_restart_is_exact(
    mariadb: PrivateMariaDB, tmp_path: Path, spark: Any
) -> None:
    """Killed at the first batch's commit (the next batch's read-ahead running), then as the next
    batch is taken from its read-ahead (the first one committed): the reruns read those batches
    anew, and the sink is exact."""
    database = f"ahead_kill_{os.getpid()}"
    mariadb.execute(f"CREATE DATABASE `{database}`")
    mariadb.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))", database=database)
    budget = {"max_bytes_per_batch": 8000, "segment_bytes": 2048}
    config = stream_config(mariadb, database, tmp_path, startup_mode="latest-offset", stream=budget)
    path = write_config_file(tmp_path, config, mariadb)
    run_stream(config, spark, until_caught_up=True)  # nothing yet: records where it starts
    _backlog(mariadb, database, 10)
    store = StateStore(config.pipeline.resolved_state_uri)
    start = store.offsets("test").load(STREAM)

    kill_9_at(path, "before-commit")
    assert store.offsets("test").load(STREAM) == start
    kill_9_at(path, "read-ahead-used")
    first = store.offsets("test").load(STREAM)
    assert first is not None
    assert start is not None
    assert first > start  # one batch, then the kill

    rerun = start_stream_process(path, None)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()
    assert json.loads(out.decode().strip().splitlines()[-1])["batches"] >= 2  # the replay, and more
    assert_sink_equals_source(config)


def _foreseen(batch_id: int, end: BinlogOffset, rows: pa.Table) -> Foreseen:
    read: Future[tuple[BinlogOffset, pa.Table] | None] = Future()
    read.set_result((end, rows))
    return Foreseen(batch_id, read)


def test_a_batch_spark_planned_otherwise_is_read_as_usual(tmp_path: Path) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "5").write_text(
        'v1\n{"batchWatermarkMs":0}\n{"file": "binlog.000002", "pos": 900}\n'
    )
    rows = pa.table({"x": [1]})
    ahead = ReadAhead(None, None, tmp_path, False)  # type: ignore[arg-type]  # take() needs neither
    planned = planned_end(tmp_path, 5)  # Spark's offsets log of the batch
    ahead.foreseen = _foreseen(5, BinlogOffset("binlog.000002", 900), rows)
    assert ahead.take(5, planned) is rows
    ahead.foreseen = _foreseen(5, BinlogOffset("binlog.000002", 800), rows)  # Spark's batch ends later
    assert ahead.take(5, planned) is None
    ahead.foreseen = _foreseen(4, BinlogOffset("binlog.000002", 900), rows)  # another batch's
    assert ahead.take(5, planned) is None
    assert ahead.take(5, planned) is None  # nothing foreseen


@pytest.mark.parametrize(
    "text",
    [
        "",
        "v1\n{}\n",
        'v2\n{}\n{"file": "b.1", "pos": 4}\n',
        'v1\n{}\n{"file": "b.1"}\n',
        "v1\n{}\nnot json\n",
    ],
)
def test_an_offsets_log_it_cannot_read_gives_no_end(tmp_path: Path, text: str) -> None:
    (tmp_path / "offsets").mkdir()
    (tmp_path / "offsets" / "1").write_text(text)
    assert planned_end(tmp_path, 1) is None
    assert planned_end(tmp_path, 2) is None  # no file
