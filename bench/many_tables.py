"""A database of many small tables, end to end, as JSON: what each table costs as their number grows.

    .venv/bin/python bench/many_tables.py [--tables 100 --tables 400] [--rows 50]

For each count, in its own database of one private MariaDB and on one Spark ``local[2]`` session
(warmed by a table of its own first):
``plan``, ``snapshot``, a stream catch-up of one update per table (``until_caught_up``, its start
included) and ``verify``, each timed; then the milliseconds each stage costs per table, and their
growth from the smallest count to the largest (``per_table_growth``: 1.0 when a table costs the
same however many there are — the reference is the same run's smallest count).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from binlake.config import PipelineConfig
from binlake.planner import plan
from binlake.sink.pyiceberg_internals import cache_immutable_files
from binlake.spark.runtime.session import spark_session
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.testing.private_server import PrivateMariaDB, private_mariadb
from binlake.verify.verification import new_verify_id, verify

sys.path.insert(0, str(Path(__file__).parent))
from snapshot import _config  # a sibling benchmark script

STAGES = ("plan", "snapshot", "stream", "verify")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tables", type=int, action="append", help="table counts (default 100 and 400)")
    parser.add_argument("--rows", type=int, default=50, help="rows per table")
    args = parser.parse_args()
    counts = sorted(args.tables or [100, 400])
    cache_immutable_files()  # as binlake's jobs start (spark/entry.py)
    results = []
    with private_mariadb() as server, tempfile.TemporaryDirectory(prefix="binlake-bench-") as work:
        # The Spark session's first jobs are paid before the counts are timed (bench/snapshot.py
        # reports the cold start): else the smallest count carries them and flatters the growth.
        _load(server, "many_warm_up", 1, args.rows)
        config = _config(server, work, "many_warm_up", None, tables=[r"many_warm_up\..*"])
        spark = spark_session(config, "bench")
        _stages(server, config, spark, 1)
        for count in counts:
            database = f"many_{count}"
            config = _config(server, work, database, None, tables=[rf"{database}\..*"])
            _load(server, database, count, args.rows)
            seconds = _stages(server, config, spark, count)
            per_table = {s: round(1000 * seconds[s] / count, 1) for s in STAGES}
            results.append({"tables": count, "seconds": seconds, "ms_per_table": per_table})
    first, last = results[0]["ms_per_table"], results[-1]["ms_per_table"]
    growth = {s: round(last[s] / first[s], 2) if first[s] else None for s in STAGES}
    print(
        json.dumps(
            {
                "benchmark": "many_tables",
                "rows_per_table": args.rows,
                "master": "local[2]",
                "results": results,
                "per_table_growth": growth,
            }
        )
    )


def _stages(server: PrivateMariaDB, config: PipelineConfig, spark: Any, count: int) -> dict[str, float]:
    """Seconds of each stage; the verification must find the sink equal to the source."""
    database = config.pipeline.name
    seconds = {"plan": _timed(lambda: plan(config)), "snapshot": _timed(lambda: run_snapshot(config, spark))}
    server.execute(*[f"UPDATE t{i} SET v = 'changed' WHERE id = 1" for i in range(count)], database=database)
    seconds["stream"] = _timed(lambda: run_stream(config, spark, until_caught_up=True))
    started = time.monotonic()
    report = verify(config, new_verify_id())
    seconds["verify"] = round(time.monotonic() - started, 2)
    if not report.clean:
        raise SystemExit(f"verify found {database}'s sink unlike its source: {report.as_dict()}")
    return seconds


def _load(server: PrivateMariaDB, database: str, count: int, rows: int) -> None:
    server.execute(f"CREATE DATABASE {database}")
    statements = []
    for i in range(count):
        statements.append(f"CREATE TABLE t{i} (id INT PRIMARY KEY, v VARCHAR(20), at DATETIME(6))")
        statements.append(f"INSERT INTO t{i} SELECT seq, CONCAT('v', seq), NOW(6) FROM seq_1_to_{rows}")
    server.execute(*statements, database=database)


def _timed(run: Callable[[], Any]) -> float:
    started = time.monotonic()
    run()
    return round(time.monotonic() - started, 2)


if __name__ == "__main__":
    main()
