"""The snapshot on Spark: exact, resumable, and correct under concurrent writes and kill -9."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
import sqlalchemy

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.planner import discover_tables, plan
from binlake.schema.type_mapping import RowConverter
from binlake.sink.catalog import open_catalog, sink_name
from binlake.sink.writer import IcebergWriter
from binlake.source.binlog.change_reader import BinlogReader
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import connect, server_version
from binlake.spark.snapshot_job import run_snapshot
from binlake.state.offset_names import SWITCH
from binlake.state.store import StateStore
from binlake.testing import demo
from binlake.testing.compare import bag, sink_rows, source_rows
from binlake.testing.private_server import PrivateMariaDB
from binlake.testing.workload import Workload
from tests.helpers import config_for, pipeline_dict, run_binlake, start_snapshot_process

Row = tuple[tuple[str, Any], ...]


@pytest.mark.slow
def test_demo_database_snapshot_equals_the_source(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    demo.load(mariadb.admin_connection, 6000, database=database)
    config = config_for(mariadb, database, tmp_path, chunk_size=300)
    plan(config)
    report = run_snapshot(config, spark)
    assert report.complete
    assert report.rows == 6000
    assert report.chunks_read == sum(t.chunks for t in report.tables.values())
    for schema in discover_tables(config):
        assert bag(sink_rows(config, schema.table)) == bag(source_rows(config, schema)), schema.table

    # ENUM and SET columns are dictionary-encoded, the others not (``snapshot_task.DICTIONARY_TYPES``).
    orders = open_catalog(config).load_table(sink_name(config, TableId(database, "orders")))
    for task in orders.scan().plan_files():
        with orders.io.new_input(task.file.file_path).open() as stream:
            meta = pq.ParquetFile(stream).metadata
        names = [meta.schema.column(i).name for i in range(meta.num_columns)]
        dictionary = {
            n for i, n in enumerate(names) if "RLE_DICTIONARY" in meta.row_group(0).column(i).encodings
        }
        assert dictionary == {"status"}, (task.file.file_path, dictionary)

    # The high watermarks in the state store are those in the Iceberg snapshot summaries.
    store = StateStore(config.pipeline.resolved_state_uri)
    catalog = open_catalog(config)
    for stored in store.plans(config.pipeline.name).load():
        writer = IcebergWriter(catalog, sink_name(config, stored.table))
        in_iceberg = writer.committed_chunks()
        in_store = {f"{stored.table.name}#{c.chunk.chunk_id}": c.high_watermark for c in stored.chunks}
        assert in_iceberg == in_store
    switch = store.offsets(config.pipeline.name).load(SWITCH)
    assert switch == min(
        c.high_watermark for p in store.plans("test").load() for c in p.chunks if c.high_watermark
    )
    assert report.switch_offset == switch

    # The query the snapshot prints for users works (DuckDB over the Iceberg scan).
    orders = catalog.load_table(f"{database}.orders")
    count = orders.scan().to_duckdb("orders").sql("SELECT COUNT(*) FROM orders").fetchall()[0]
    assert count == (report.tables[f"{database}.orders"].rows,)

    # A rerun reads nothing: every chunk is finished.
    again = run_snapshot(config, spark)
    assert (again.chunks_read, again.chunks_recovered) == (0, 0)


def test_committed_but_unrecorded_chunks_are_not_read_again(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_1000",
        database=database,
    )
    config = config_for(mariadb, database, tmp_path, chunk_size=100)
    (planned,) = plan(config)
    first = run_snapshot(config, spark)
    assert first.chunks_read == len(planned.chunks) > 4
    # As if the job had died between the Iceberg commit and the state-store update:
    engine = sqlalchemy.create_engine(config.pipeline.resolved_state_uri)
    with engine.begin() as conn:
        conn.execute(
            sqlalchemy.text(
                "UPDATE binlake_chunks SET status = 'planned', high_watermark = NULL WHERE chunk_id < 4"
            )
        )
    resumed = run_snapshot(config, spark)
    assert (resumed.chunks_read, resumed.chunks_recovered) == (0, 4)
    assert resumed.complete
    rows = sink_rows(config, TableId(database, "t"))
    assert len(rows) == 1000
    assert len({r["id"] for r in rows}) == 1000


def test_a_table_is_committed_once_its_tasks_finish_while_others_still_read(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    """A wave commits each table as its tasks finish, not once its slowest task does: here `held`'s
    one task waits on a table lock while `quick`'s chunks are read, committed and recorded."""
    mariadb.execute(
        "CREATE TABLE quick (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO quick SELECT seq, CONCAT('q', seq) FROM seq_1_to_1000",
        "CREATE TABLE held (id INT PRIMARY KEY, v VARCHAR(10))",
        "INSERT INTO held SELECT seq, CONCAT('h', seq) FROM seq_1_to_50",
        database=database,
    )
    config = config_for(mariadb, database, tmp_path, chunk_size=100)
    plan(config)
    quick = TableId(database, "quick")
    with contextlib.closing(mariadb.admin_connection(database)) as lock, lock.cursor() as cur:
        cur.execute("LOCK TABLES held WRITE")  # `held`'s SELECT waits; its discovery does not
        with ThreadPoolExecutor(1) as pool:
            snapshot = pool.submit(run_snapshot, config, spark)
            try:
                early = _wait_for(lambda: _finished_chunks(config, quick) == 10, seconds=60)
                committed = _committed_chunks(config, quick)
                still_reading = not snapshot.done()
            finally:
                cur.execute("UNLOCK TABLES")
            report = snapshot.result(timeout=120)
    assert early, "quick was not recorded while held's task waited"
    assert still_reading
    assert committed == 10
    assert report.complete
    assert report.rows == 1050
    for schema in discover_tables(config):
        assert bag(sink_rows(config, schema.table)) == bag(source_rows(config, schema)), schema.table


def _wait_for(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def _finished_chunks(config: PipelineConfig, table: TableId) -> int:
    with StateStore(config.pipeline.resolved_state_uri) as store:
        plans = [p for p in store.plans(config.pipeline.name).load() if p.table == table]
    return sum(c.status == "finished" for p in plans for c in p.chunks)


def _committed_chunks(config: PipelineConfig, table: TableId) -> int:
    return len(IcebergWriter(open_catalog(config), sink_name(config, table)).committed_chunks())


@pytest.mark.slow
def test_each_chunk_is_exact_at_its_high_watermark_under_writes(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    demo.load(mariadb.admin_connection, 20000, database=database)
    config = config_for(
        mariadb, database, tmp_path, chunk_size=250, tables=[rf"{database}\.(orders|order_items|customers)"]
    )
    plan(config)
    workload = Workload(
        mariadb.admin_connection, database=database, rate=400, txn_size=2, tables=("orders", "customers")
    )
    workload.start()
    try:
        report = run_snapshot(config, spark)
    finally:
        stats = workload.stop()
    assert report.complete
    assert stats.total > 50  # the workload really wrote during the snapshot
    with contextlib.closing(connect(config.source)) as conn:
        end = current_offset(conn, server_version(conn))
    schemas = {s.table: s for s in discover_tables(config)}
    store = StateStore(config.pipeline.resolved_state_uri)
    moved = 0
    for stored in store.plans(config.pipeline.name).load():
        schema = schemas[stored.table]
        converter = RowConverter(schema)
        key = schema.primary_key
        in_sink = sink_rows(config, stored.table)
        for state in stored.chunks:
            assert state.high_watermark is not None
            # The range now, with every later change undone by replaying the binlog backwards,
            # is the range at the chunk's high watermark.
            where, params = state.chunk.where()
            rows = {tuple(r[k] for k in key): r for r in source_rows(config, schema, where, params)}
            changes = list(
                BinlogReader(
                    config.source, 6300, state.high_watermark, end, {stored.table}, lambda _, c=converter: c
                ).changes()
            )
            moved += len(changes)
            for change in reversed(changes):
                if change.after is not None:
                    rows.pop(tuple(change.after[k] for k in key), None)
                if change.before is not None and _in(state.chunk, change.before[state.chunk.key_column]):
                    rows[tuple(change.before[k] for k in key)] = change.before
            expected = [r for r in rows.values() if _in(state.chunk, r[state.chunk.key_column])]
            got = [r for r in in_sink if _in(state.chunk, r[state.chunk.key_column])]
            assert bag(got) == bag(expected), state.chunk.name
    assert moved > 0  # chunks were really read while the tables changed


def _in(chunk: Any, value: Any) -> bool:
    r = chunk.range
    return (r.start is None or value >= r.start) and (r.end is None or value < r.end)


@pytest.mark.slow
def test_kill_9_then_rerun_reads_each_chunk_once(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(30))",
        "INSERT INTO t SELECT seq, REPEAT('x', seq % 30) FROM seq_1_to_60000",
        database=database,
    )
    raw = pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work", chunk_size=300)
    raw["pipeline"]["parallelism"] = 1
    raw["pipeline"]["snapshot_chunks_per_task"] = 10  # 20 tasks in 10 waves: commits as it goes
    path = write_config(raw)
    config = PipelineConfig.model_validate(raw)
    assert run_binlake("--config", str(path), "plan").returncode == 0
    job = start_snapshot_process(path)
    store = StateStore(config.pipeline.resolved_state_uri)
    deadline = time.monotonic() + 300
    finished_before = 0
    while time.monotonic() < deadline and job.poll() is None:
        finished_before = store.plans("test").load()[0].finished
        if finished_before > 0:
            break
        time.sleep(0.2)
    assert job.poll() is None, job.stderr.read().decode() if job.stderr else ""
    os.killpg(job.pid, signal.SIGKILL)  # the driver and its Spark JVM, mid-snapshot
    job.wait()
    (stored,) = store.plans("test").load()
    finished_at_kill = stored.finished
    assert 0 < finished_at_kill < len(stored.chunks)

    rerun = run_binlake("--config", str(path), "snapshot", "--json", timeout=600)
    assert rerun.returncode == 0, rerun.output
    summary = json.loads(rerun.stdout.strip().splitlines()[-1])
    assert summary["complete"]
    assert summary["chunks_read"] + summary["chunks_recovered"] + finished_at_kill == len(stored.chunks)
    # Every chunk is committed exactly once across all Iceberg snapshots, and the table is exact.
    writer = IcebergWriter(open_catalog(config), f"{database}.t")
    ids = [c.chunk_id for c in writer.committed_chunk_commits()]
    assert sorted(ids) == sorted(set(ids))
    assert len(ids) == len(stored.chunks)
    rows = sink_rows(config, TableId(database, "t"))
    assert len(rows) == 60000
    assert len({r["id"] for r in rows}) == 60000


def test_a_spark_jobs_chunks_of_one_table_land_in_one_commit(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t SELECT seq FROM seq_1_to_50", database=database
    )
    config = PipelineConfig.model_validate(
        pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work", chunk_size=10)
    )
    plan(config)
    report = run_snapshot(config, spark)
    assert report.chunks_read == 5  # in 5 tasks of one Spark job (the last chunk one of its own)
    writer = IcebergWriter(open_catalog(config), sink_name(config, TableId(database, "t")))
    appends = [s for s in writer.table.snapshots() if s.summary and s.summary.operation.value == "append"]
    assert len(appends) == 1
    assert len(writer.committed_chunk_commits()) == 5
    assert len(sink_rows(config, TableId(database, "t"))) == 50


def test_status_shows_progress_and_switch(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, write_config: Callable[..., Path], spark: Any
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t SELECT seq FROM seq_1_to_50", database=database
    )
    raw = pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work", chunk_size=10)
    path = write_config(raw)
    config = PipelineConfig.model_validate(raw)
    plan(config)
    before = json.loads(run_binlake("--config", str(path), "status", "--json").stdout)
    assert before["tables"][0]["finished_chunks"] == 0
    assert before["switch_offset"] is None
    run_snapshot(config, spark)
    after = run_binlake("--config", str(path), "status")
    assert f"{database}.t" in after.stdout
    assert "5/5" in after.stdout
    assert "stream start (switch) offset: binlog." in after.stdout


def test_snapshot_holds_its_tables_and_respects_other_holders(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    import datetime as dt

    from binlake.snapshot import SnapshotError
    from binlake.state.holders import Holder
    from binlake.state.leases import Command

    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t SELECT seq FROM seq_1_to_20", database=database
    )
    config = config_for(mariadb, database, tmp_path, chunk_size=10)
    plan(config)
    store = StateStore(config.pipeline.resolved_state_uri)
    maintain = Holder.this_process(Command.MAINTAIN)
    store.leases("test").acquire(f"{database}.t", maintain, dt.timedelta(minutes=5))
    with pytest.raises(SnapshotError, match=r"held by `binlake maintain`.*Wait for it"):
        run_snapshot(config, spark)
    assert store.plans("test").load()[0].finished == 0
    store.leases("test").release(f"{database}.t", maintain)
    assert run_snapshot(config, spark).complete
    # Released at the end: maintenance may run now.
    store.leases("test").acquire(
        f"{database}.t", Holder.this_process(Command.MAINTAIN), dt.timedelta(minutes=5)
    )


@pytest.mark.slow
def test_the_printed_query_hint_runs(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY)", "INSERT INTO t SELECT seq FROM seq_1_to_42", database=database
    )
    path = write_config(pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work"))
    result = run_binlake("--config", str(path), "snapshot", timeout=600)
    assert result.returncode == 0, result.output
    lines = result.stdout.splitlines()
    start = lines.index("query them from Python:") + 1
    code = "\n".join(line[2:] for line in lines[start:] if line.startswith("  "))
    assert "load_catalog('binlake_test', type='sql'" in code
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "42" in run.stdout  # the DuckDB count of the table, as printed for users


def test_task_errors_are_reported_in_binlake_terms() -> None:
    from binlake.spark.chunk_jobs import task_error

    spark_text = (
        "An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
        '  File "chunk_reader.py", line 9, in read\n    raise ChunkReadError(...)\n'
        "binlake.source.chunks.reader.ChunkReadError: Could not read chunk orders#3 [10, 20) of "
        "`shop.orders`: the table no longer exists. Fix: plan again."
    )
    assert task_error(Exception(spark_text)) == (
        "Could not read chunk orders#3 [10, 20) of `shop.orders`: the table no longer exists. "
        "Fix: plan again."
    )
    assert task_error(Exception("java.lang.OutOfMemoryError: Java heap space")) is None


@pytest.mark.slow
def test_a_failing_task_gives_binlakes_message_and_commits_nothing(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, write_config: Callable[..., Path]
) -> None:
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = ''")
        cur.execute("CREATE TABLE d (id INT PRIMARY KEY, day DATE)")
        cur.execute("INSERT INTO d VALUES (1, '2024-01-01'), (2, '0000-00-00')")
    raw = pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path / "work", zero_dates="reject")
    result = run_binlake("--config", str(write_config(raw)), "snapshot", timeout=600)
    assert result.returncode == 1
    # Spark logs the task failure for diagnosis; binlake's own message is the last word.
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        "binlake snapshot: error: A snapshot task failed; "
        "its table's chunks of this Spark job were not committed"
    )
    assert "1 rows with zero dates" in last
    assert "source.zero_dates: null" in last
    config = PipelineConfig.model_validate(raw)
    assert StateStore(config.pipeline.resolved_state_uri).plans("test").load()[0].finished == 0
    assert sink_rows(config, TableId(database, "d")) == []
