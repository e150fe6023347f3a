"""Any identifier: a table and columns whose names hold `%`, backquotes, quotes, spaces and
non-ASCII letters go through validate, plan, snapshot, stream (under writes), verify and a backfill
exact, read alike by pyiceberg and DuckDB."""

from __future__ import annotations

import contextlib
import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from binlake.events import quote
from binlake.planner import plan
from binlake.source.server.validator import has_errors, validate
from binlake.spark.backfill_job import run_backfill
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.testing.private_server import PrivateMariaDB
from binlake.verify.verification import verify
from tests.helpers import assert_sink_equals_source, stream_config

TABLE = "Bestellungen %s 'ü' \"x\" `y`"
KEY, TEXT, NUMBER = "Nr. %d", "Grüße 'a' \"b\"", "100% `ok`"


def _writes(mariadb: PrivateMariaDB, database: str, stop: threading.Event, done: list[int]) -> None:
    rng = random.Random(11)
    table, key, text, number = quote(TABLE), quote(KEY), quote(TEXT), quote(NUMBER)
    with contextlib.closing(mariadb.admin_connection(database)) as conn, conn.cursor() as cur:
        while not stop.is_set():
            k = rng.randrange(1, 400)
            cur.execute(rng.choice([  # no parameters: pymysql would read the names' `%` as placeholders
                f"UPDATE {table} SET {number} = {number} + 1, {text} = CONCAT({text}, '%') WHERE {key} = {k}",
                f"INSERT INTO {table} VALUES ({k}, 'neu 100%', 1) ON DUPLICATE KEY UPDATE {number} = 0",
                f"DELETE FROM {table} WHERE {key} = {k}",
            ]))  # fmt: skip
            done.append(1)
            time.sleep(0.005)


@pytest.mark.slow
def test_odd_identifiers_go_through_every_step_exact(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, spark: Any
) -> None:
    mariadb.execute(
        f"CREATE TABLE {quote(TABLE)} ({quote(KEY)} INT PRIMARY KEY, {quote(TEXT)} VARCHAR(200), "
        f"{quote(NUMBER)} INT)",
        f"INSERT INTO {quote(TABLE)} SELECT seq * seq * seq, CONCAT('wert ', seq, ' %'), seq "
        "FROM seq_1_to_300",
        database=database,
    )
    config = stream_config(mariadb, database, tmp_path, chunk_size=40)
    checks = validate(config)
    assert not has_errors(checks), [c for c in checks if c.status == "error"]
    (planned,) = plan(config)
    assert planned.strategy == "uneven"  # sparse keys: chunk ends found by queries with parameters
    assert run_snapshot(config, spark).complete
    stop, done = threading.Event(), []
    writer = threading.Thread(target=_writes, args=(mariadb, database, stop, done), daemon=True)
    writer.start()
    try:
        time.sleep(2)
        run_stream(config, spark, until_caught_up=True)
    finally:
        stop.set()
        writer.join(30)
    assert done
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
    report = verify(config, "odd")
    assert {v.status for v in report.verdicts} == {"equal"}, [v.note for v in report.verdicts]
    run_backfill(config, spark, "odd", tables=[f"{database}.{TABLE}"])
    mariadb.execute(
        f"UPDATE {quote(TABLE)} SET {quote(NUMBER)} = -1 WHERE {quote(KEY)} < 20", database=database
    )
    run_stream(config, spark, until_caught_up=True)
    assert_sink_equals_source(config)
