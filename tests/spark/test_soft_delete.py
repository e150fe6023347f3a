"""Soft deletes (issue 43): a row the source deletes stays in the upsert table, marked with the
time and binlog position of its delete; a re-insert makes it live again — exact through kills, a
key update, a MINIMAL-image delete, a statement-logged delete healed by a backfill and a TRUNCATE
(every live row marked at its time and position); verify and the comparison see the live rows,
DuckDB reads what pyiceberg reads."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path
from typing import Any

import pytest

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.planner import plan
from binlake.sink.catalog import open_catalog, sink_name
from binlake.sink.history.soft_delete import DELETED, DELETED_AT, DELETED_POSITION
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.testing import duckdb_iceberg
from binlake.testing.compare import bag
from binlake.testing.private_server import PrivateMariaDB
from binlake.verify.verification import verify
from tests.helpers import (
    assert_sink_equals_source,
    config_dict,
    in_session,
    kill_9_at,
    stream_config,
    write_config_file,
)

pytestmark = pytest.mark.slow

SET_UP = [
    "CREATE TABLE orders (id INT PRIMARY KEY, tenant_id INT NOT NULL, note TEXT, total DECIMAL(10,2))",
    "INSERT INTO orders SELECT seq, seq % 7, CONCAT('note ', seq), seq / 4 FROM seq_1_to_300",
]


def _config(mariadb: PrivateMariaDB, database: str, tmp_path: Path) -> PipelineConfig:
    config = stream_config(mariadb, database, tmp_path, chunk_size=100)
    raw = config_dict(config)
    raw["sink"]["modes"] = [{"source_table": rf"{database}\.orders", "mode": "upsert", "soft_delete": True}]
    return PipelineConfig.model_validate(raw)


def _workload(mariadb: PrivateMariaDB, database: str, stop: threading.Event, done: list[int]) -> None:
    """Deletes, re-inserts of deleted keys, key updates (the old key deleted; the new keys, above
    10,000, are never deleted), updates."""
    n = 10_000
    while not stop.is_set():
        n += 1
        k = n % 300 + 1
        mariadb.execute(
            f"DELETE FROM orders WHERE id = {(k * 13) % 300 + 1}",
            f"INSERT IGNORE INTO orders VALUES ({(k * 29) % 300 + 1}, 1, 'back again', {n})",
            f"UPDATE orders SET id = {n} WHERE id = {(k * 17) % 300 + 1}",
            f"UPDATE orders SET total = total + 1, note = CONCAT(note, '+') WHERE id = {k}",
            database=database,
        )
        done.append(n)


def test_deleted_rows_stay_marked_through_kills_key_updates_and_a_healed_gap(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(*SET_UP, database=database)
    config = _config(mariadb, database, tmp_path)
    plan(config)
    assert run_snapshot(config, spark).complete
    table = open_catalog(config).load_table(sink_name(config, TableId(database, "orders")))
    assert set(table.scan().to_arrow().column(DELETED).to_pylist()) == {False}

    stop, done = threading.Event(), []
    writer = threading.Thread(target=_workload, args=(mariadb, database, stop, done))
    writer.start()
    try:
        path = write_config_file(tmp_path, config, mariadb)
        kill_9_at(path, "before-commit")
        kill_9_at(path, "after-commit")
        written = len(done)
    finally:
        stop.set()
        writer.join()
    # A delete with a MINIMAL image (the key alone), and one logged as a statement (a gap: the
    # backfill that heals it finds the rows gone from the source and marks them).
    live_ids = [r[0] for r in mariadb.query("SELECT id FROM orders ORDER BY id", database=database)]
    in_session(mariadb, database, "SET SESSION binlog_row_image = 'MINIMAL'",
             f"DELETE FROM orders WHERE id = {live_ids[0]}")  # fmt: skip
    in_session(mariadb, database, "SET SESSION binlog_format = 'STATEMENT'",
             f"DELETE FROM orders WHERE id IN ({live_ids[1]}, {live_ids[2]})")  # fmt: skip
    assert written > 0
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)  # the live rows
    assert {v.status for v in verify(config, "v1").verdicts} == {"equal"}

    rows = open_catalog(config).load_table(sink_name(config, TableId(database, "orders"))).scan().to_arrow()
    source = {r[0] for r in mariadb.query("SELECT id FROM orders", database=database)}
    deleted = [r for r in rows.to_pylist() if r[DELETED]]
    # Exactly the keys the source deleted: the first 300 less the live ones (keys above 10,000
    # are made by key updates and never deleted).
    assert {r["id"] for r in deleted} == set(range(1, 301)) - source
    assert all(r[DELETED_AT] is not None and r[DELETED_POSITION] is not None for r in deleted)
    minimal = next(r for r in deleted if r["id"] == live_ids[0])
    assert minimal["note"] is not None  # the MINIMAL delete kept the row's values
    healed = [r for r in deleted if r["id"] in live_ids[1:3]]
    assert len(healed) == 2
    assert all(r["note"] is not None for r in healed)
    assert {r[DELETED] for r in rows.to_pylist() if r["id"] in source} == {False}

    # A TRUNCATE under `evolve`: every live row marked deleted at the statement's time and position
    # (the session's clock set, so the binlog event carries a known time); rows deleted earlier keep
    # their marks; a key inserted after it is live again.
    raw = config_dict(config)
    raw["pipeline"]["schema_change_behavior"] = "evolve"
    config = PipelineConfig.model_validate(raw)
    earlier = {r["id"]: (r[DELETED_AT], r[DELETED_POSITION]) for r in deleted}
    in_session(mariadb, database, "SET TIMESTAMP = 1700000000", "TRUNCATE TABLE orders")
    file, pos = mariadb.query("SHOW MASTER STATUS")[0][:2]
    kept = min(source)
    mariadb.execute(f"INSERT INTO orders VALUES ({kept}, 1, 'after the truncate', 1)", database=database)
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    assert {v.status for v in verify(config, "v2").verdicts} == {"equal"}
    table = open_catalog(config).load_table(sink_name(config, TableId(database, "orders")))
    after = table.scan().to_arrow().to_pylist()
    assert bag(duckdb_iceberg.read(table).to_pylist()) == bag(after)
    marks = {r["id"]: (r[DELETED_AT], r[DELETED_POSITION]) for r in after if r[DELETED]}
    truncated = (dt.datetime.fromtimestamp(1_700_000_000, dt.UTC), BinlogOffset(file, int(pos)).packed)
    assert marks == {**dict.fromkeys(source - {kept}, truncated), **earlier}
    assert [(r["id"], r["note"]) for r in after if not r[DELETED]] == [(kept, "after the truncate")]
    assert {r["note"] for r in after if r["id"] in source - {kept}} != {None}  # the rows as truncated
