"""The binlog stream on Spark: exact after the snapshot, exactly once, every startup mode."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from binlake.events import TableId
from binlake.planner import plan
from binlake.sink.catalog import open_catalog, sink_name
from binlake.sink.exactly_once import BATCH_KEY
from binlake.source.binlog.scan import binary_logs
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import server_version
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.state.offset_names import STREAM
from binlake.state.store import StateStore
from binlake.stream.positions import HEAD
from binlake.testing import demo
from binlake.testing.compare import sink_rows
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload
from tests.conftest import ServerFactory
from tests.helpers import (
    assert_sink_equals_source,
    config_dict,
    kill_9_at,
    run_binlake,
    start_stream_process,
    stream_config,
    write_config_file,
)

#: A server whose binlog rotates every 64 KiB: micro-batches and segments span many files.
SMALL_BINLOG = {"max-binlog-size": "65536"}


def head(server: PrivateMariaDB) -> Any:
    with contextlib.closing(server.admin_connection()) as conn:
        return current_offset(conn, server_version(conn))


#: Merge modes of the sink tables; ``executors``: merge-on-read, every batch merged in key buckets
#: on the executors (``stream.shares.bucket_merge``) instead of only the large ones.
MODES = ["copy-on-write", "merge-on-read", "executors"]


def _merged(config: Any, mode: str) -> Any:
    """``config`` with its sink tables in merge ``mode`` (merge-on-read: through the key index)."""
    raw = config_dict(config)
    merge = "merge-on-read" if mode == "executors" else mode
    raw["sink"]["table_properties"] = {**raw["sink"].get("table_properties", {}), "write.merge.mode": merge}
    if mode == "executors":
        raw["stream"]["executor_merge_from"] = 0
    return type(config).model_validate(raw)


@pytest.mark.parametrize("mode", MODES)
def test_stream_after_snapshot_is_exact(
    mode: str, mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), d DECIMAL(10,2))",
        "INSERT INTO t SELECT seq, CONCAT('v', seq), seq / 7 FROM seq_1_to_500",
        "CREATE TABLE page_views (customer_id INT, b VARCHAR(10))",
        "INSERT INTO page_views VALUES (1, 'x'), (1, 'x'), (2, 'y'), (NULL, 'n')",
        database=database,
    )
    config = _merged(stream_config(mariadb, database, tmp_path, chunk_size=100), mode)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "INSERT INTO t SELECT seq, 'new', 1.5 FROM seq_501_to_800",
        "UPDATE t SET v = 'upd' WHERE id % 3 = 0",
        "DELETE FROM t WHERE id % 10 = 0",
        "UPDATE t SET id = id + 10000 WHERE id BETWEEN 41 AND 45",  # primary-key updates
        "INSERT INTO t VALUES (10, 'back', 0)",  # deleted above, inserted again
        "DELETE FROM page_views WHERE customer_id = 1 LIMIT 1",  # one of two equal rows
        "INSERT INTO page_views VALUES (3, 'z'), (3, 'z'), (NULL, 'n')",
        "UPDATE page_views SET b = 'w' WHERE customer_id = 2",
        database=database,
    )
    report = run_stream(config, spark, until_caught_up=True)
    assert report.batches >= 1
    assert report.applied[f"{database}.t"]["deletes"] >= 5
    assert_sink_equals_source(config)
    # Caught up: a rerun reads nothing new and changes nothing.
    before = {t: len(sink_rows(config, TableId.parse(t))) for t in report.applied}
    again = run_stream(config, spark, until_caught_up=True)
    assert again.rows == 0
    assert before == {t: len(sink_rows(config, TableId.parse(t))) for t in report.applied}
    if mode != "copy-on-write":  # the batches went through the key index, not around it
        assert list(config.key_index_dir.glob(f"{database}.t-*/base-*"))
    if mode == "executors":  # merged in two key buckets: a batch's commit adds a file of each
        table = open_catalog(config).load_table(sink_name(config, TableId(database, "t")))
        batches = [
            s.summary for s in table.snapshots() if s.summary and BATCH_KEY in s.summary.additional_properties
        ]
        assert any(summary.additional_properties.get("added-data-files") == "2" for summary in batches)


@pytest.mark.slow
def test_workload_during_snapshot_and_stream_then_caught_up_is_exact(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    demo.load(mariadb.admin_connection, 20000, database=database)
    config = stream_config(mariadb, database, tmp_path, chunk_size=400)
    plan(config)
    workload = Workload(mariadb.admin_connection, database=database, rate=300, txn_size=3).start()
    stop = threading.Event()
    try:
        assert run_snapshot(config, spark).complete
        reports: list[Any] = []
        batches = threading.Semaphore(0)
        stream = threading.Thread(
            target=lambda: reports.append(
                run_stream(config, spark, stop=stop, progress=lambda _b, _r: batches.release())
            )
        )
        stream.start()
        # the continuous stream runs while the workload writes: at least two batches of it (waited
        # for, not timed: a slow machine starts Spark's query later)
        time.sleep(12)
        assert batches.acquire(timeout=300)
        assert batches.acquire(timeout=300)
    finally:
        stats = workload.stop()
        stop.set()
    stream.join(120)
    assert reports
    assert reports[0].batches >= 2
    assert stats.total > 1000
    final = run_stream(config, spark, until_caught_up=True)
    assert final.end is not None or final.rows == 0
    assert_sink_equals_source(config)


@pytest.mark.parametrize("mode", MODES)
def test_kill_9_mid_batch_before_then_after_the_commit_then_restart_is_exact(
    mode: str,
    mariadb: PrivateMariaDB,
    database: str,
    tmp_path: Path,
    spark: Any,
) -> None:
    # One set-up, three runs of the job: killed before any Iceberg commit of the batch, killed
    # again on the replay right after a table's commit, then a clean restart. Each crash is checked
    # on its own; the second also proves a replay after a crash can crash and still end exact.
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v INT)",
        "INSERT INTO t SELECT seq, 0 FROM seq_1_to_1000",
        "CREATE TABLE page_views (customer_id INT, v INT)",
        "INSERT INTO page_views SELECT seq % 50, 0 FROM seq_1_to_1000",
        database=database,
    )
    config = _merged(stream_config(mariadb, database, tmp_path, chunk_size=300), mode)
    path = write_config_file(tmp_path, config, mariadb)
    plan(config)
    assert run_snapshot(config, spark).complete
    mariadb.execute(
        "UPDATE t SET v = v + 1 WHERE id <= 600",
        "INSERT INTO page_views SELECT seq % 50, 1 FROM seq_1_to_300",
        "DELETE FROM page_views WHERE customer_id = 7 AND v = 0 LIMIT 3",
        "UPDATE t SET id = id + 5000 WHERE id > 990",
        database=database,
    )
    store = StateStore(config.pipeline.resolved_state_uri)
    switch = store.offsets("test").load("switch")
    t = TableId(database, "t")

    def updated_rows() -> int:
        return sum(r["v"] == 1 for r in sink_rows(config, t))

    kill_9_at(path, "before-commit")
    assert store.offsets("test").load(STREAM) == switch  # the killed batch was never recorded
    assert updated_rows() == 0  # nothing of the batch reached Iceberg

    kill_9_at(path, "after-commit")
    assert store.offsets("test").load(STREAM) == switch
    assert updated_rows() > 0  # a table's commit landed before the kill

    rerun = start_stream_process(path, None)
    out, err = rerun.communicate(timeout=300)
    assert rerun.returncode == 0, err.decode()
    assert json.loads(out.decode().strip().splitlines()[-1])["batches"] >= 1
    assert_sink_equals_source(config)  # no duplicate (page_views has none to hide behind), no loss


def test_binlog_rotation_and_big_transactions_inside_one_batch(
    mariadb_factory: ServerFactory, tmp_path: Path, spark: Any
) -> None:
    server = mariadb_factory(**SMALL_BINLOG)
    database = f"rot_{os.getpid()}"
    server.execute(f"CREATE DATABASE `{database}`")
    server.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))", database=database)
    budget = {"max_bytes_per_batch": 64 * 1024 * 1024, "segment_bytes": 32 * 1024}
    config = stream_config(server, database, tmp_path, startup_mode="latest-offset", stream=budget)
    first = run_stream(config, spark, until_caught_up=True)  # nothing yet: records where it starts
    with contextlib.closing(server.admin_connection()) as conn:
        files_before = len(binary_logs(conn))
    server.execute(
        # One transaction of many row events; MariaDB never splits a transaction across files.
        "INSERT INTO t SELECT seq, REPEAT('a', 150) FROM seq_1_to_4000",
        *[f"UPDATE t SET v = REPEAT('{c}', 120) WHERE id % 7 = {i}" for i, c in enumerate("bcdefg")],
        "DELETE FROM t WHERE id % 11 = 0",
        database=database,
    )
    with contextlib.closing(server.admin_connection()) as conn:
        files_after = len(binary_logs(conn))
    assert files_after - files_before >= 3  # the changes span several binlog files
    report = run_stream(config, spark, until_caught_up=True)
    assert report.start == first.start
    assert report.batches == 1  # all of it in one micro-batch, cut into parallel segments
    assert_sink_equals_source(config)


def test_small_batches_by_byte_budget_and_an_idle_source(
    mariadb_factory: ServerFactory, tmp_path: Path, spark: Any
) -> None:
    server = mariadb_factory(**SMALL_BINLOG)
    database = f"idle_{os.getpid()}"
    server.execute(f"CREATE DATABASE `{database}`")
    server.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))", database=database)
    budget = {"max_bytes_per_batch": 20000, "trigger_interval_s": 1}
    config = stream_config(server, database, tmp_path, startup_mode="latest-offset", stream=budget)
    stop = threading.Event()
    reports: list[Any] = []
    stream = threading.Thread(target=lambda: reports.append(run_stream(config, spark, stop=stop)))
    stream.start()
    store = StateStore(config.pipeline.resolved_state_uri)
    try:
        # latest-offset: the stream takes only what comes after it started.
        _wait_until(lambda: store.offsets("test").load(STREAM) is not None, 90)
        for i in range(40):  # 40 transactions of ~2 KB: several batches of at most ~20 KB
            server.execute(
                f"INSERT INTO t SELECT seq + {i * 10}, REPEAT('x', 150) FROM seq_1_to_10", database=database
            )
        _wait_until(lambda: store.offsets("test").load(STREAM) == _plain(head(server)), 90)
        checked = store.offsets("test").load_record(HEAD)
        time.sleep(3.5)  # idle for longer than the trigger interval
        checked_later = store.offsets("test").load_record(HEAD)
        assert checked
        assert checked_later
        assert checked_later[1] > checked[1]  # heartbeats go on
        server.execute("UPDATE t SET v = 'after idle' WHERE id <= 5", database=database)
        _wait_until(lambda: store.offsets("test").load(STREAM) == _plain(head(server)), 90)
        watched = run_binlake("--config", str(write_config_file(tmp_path, config, server)), "status",
                              "--max-lag", "60")  # fmt: skip
        assert watched.returncode == 0, watched.output  # running, caught up: nothing to tell
        assert "stream (running)" in watched.stdout
    finally:
        stop.set()
        stream.join(60)
    assert reports
    assert reports[0].batches >= 4
    assert_sink_equals_source(config)
    status = run_binlake("--config", str(write_config_file(tmp_path, config, server)), "status", "--json")
    assert status.returncode == 0, status.output
    stream_status = json.loads(status.stdout)["stream"]
    assert stream_status["caught_up"] is True
    assert stream_status["last_batch"]["changes"][f"{database}.t"]["upserts"] == 5
    assert stream_status["running"] is False
    down = run_binlake("--config", str(write_config_file(tmp_path, config, server)), "status", "--json",
                       "--max-lag", "60")  # fmt: skip
    assert down.returncode == 1
    assert "status: the stream of `test` is not running" in down.stderr


def _plain(offset: Any) -> Any:
    from binlake.offsets import BinlogOffset

    return BinlogOffset(offset.file, offset.pos)


def _wait_until(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.3)


def _two_phases(server: PrivateMariaDB, database: str) -> tuple[dict[str, Any], int]:
    """Rows 1-100 (phase A), then rows 101-150 (phase B); returns where B starts, by each measure."""
    server.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20))", database=database)
    server.execute("INSERT INTO t SELECT seq, 'a' FROM seq_1_to_100", database=database)
    with contextlib.closing(server.admin_connection()) as conn, conn.cursor() as cur:
        at = current_offset(conn, server_version(conn))
        cur.execute("SELECT @@gtid_binlog_pos")
        gtid = cur.fetchone()[0]
    second = int(time.time())
    while int(time.time()) == second:  # event times are whole seconds: B starts in a later one
        time.sleep(0.05)
    timestamp_ms = int(time.time()) * 1000
    server.execute("INSERT INTO t SELECT seq, 'b' FROM seq_101_to_150", database=database)
    server.execute("UPDATE t SET v = 'b2' WHERE id IN (1, 101)", database=database)
    return {"file": at.file, "pos": at.pos, "gtid": gtid}, timestamp_ms


@pytest.mark.parametrize("mode", ["specific-offset", "specific-gtid", "timestamp", "earliest-offset"])
def test_startup_modes(mode: str, mariadb_factory: ServerFactory, tmp_path: Path, spark: Any) -> None:
    server = mariadb_factory(**SMALL_BINLOG)
    database = f"mode_{mode.replace('-', '_')}_{os.getpid()}"
    server.execute(f"CREATE DATABASE `{database}`")
    offset, timestamp_ms = _two_phases(server, database)
    options: dict[str, Any] = {"startup_mode": "specific-offset" if mode == "specific-gtid" else mode}
    if mode == "specific-offset":
        options["startup_offset"] = {"file": offset["file"], "pos": offset["pos"]}
    elif mode == "specific-gtid":
        options["startup_offset"] = {"gtid": offset["gtid"]}
    elif mode == "timestamp":
        options["startup_timestamp_ms"] = timestamp_ms
    config = stream_config(server, database, tmp_path, **options)
    report = run_stream(config, spark, until_caught_up=True)
    rows = {r["id"]: r["v"] for r in sink_rows(config, TableId(database, "t"))}
    if mode == "earliest-offset":
        assert_sink_equals_source(config)  # the whole history is in the binlog
        assert len(rows) == 150
    else:
        # Only phase B: the rows after the start, and the update of row 1 (an upsert of it).
        assert report.start.file == offset["file"]
        assert report.start.pos == offset["pos"]
        assert rows == {**{i: "b" for i in range(101, 151)}, 1: "b2", 101: "b2"}


def test_a_purged_start_offset_names_it_the_oldest_and_the_fix(
    mariadb_factory: ServerFactory, tmp_path: Path
) -> None:
    server = mariadb_factory(**{"max-binlog-size": "131072"})
    database = f"purged_{os.getpid()}"
    server.execute(f"CREATE DATABASE `{database}`")
    server.execute("CREATE TABLE t (id INT PRIMARY KEY)", database=database)
    first = head(server)
    server.execute("FLUSH BINARY LOGS", "FLUSH BINARY LOGS")
    newest = head(server)
    server.execute(f"PURGE BINARY LOGS TO '{newest.file}'")
    config = stream_config(server, database, tmp_path, startup_mode="specific-offset",
                           startup_offset={"file": first.file, "pos": first.pos})  # fmt: skip
    path = write_config_file(tmp_path, config, server)
    result = run_binlake("--config", str(path), "stream", "--until-caught-up", timeout=300)
    assert result.returncode != 0
    message = result.stderr
    assert f"{first.file}:{first.pos}" in message
    assert f"the oldest binlog file there is {newest.file}" in message
    assert "startup_mode: initial" in message
    assert "Traceback" not in message
    assert server.password not in result.output
