"""A backfill of one table while the stream and a workload run, on Spark local[2], as JSON (+ HTML).

    .venv/bin/python bench/backfill.py [--rows 200000] [--rate 500] [--report bench/backfill.html]

Loads the demo database (``--rows`` customers; orders and the rest scale with it), snapshots it,
starts a continuous stream (trigger 2 s) and the demo workload (``--rate`` statements/s), then
backfills ``shop.orders`` in the same Spark session. Figures: staging rows/s, the time from the
last unit staged to the last applied, the stream's batch times and lag before and while units are
applied, the stream driver's peak RSS growth, and whether the sink equals the source at the end.
"""

from __future__ import annotations

import argparse
import html
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from binlake.backfill.wait import wait_applied
from binlake.config import PipelineConfig
from binlake.planner import plan
from binlake.sink.pyiceberg_internals import cache_immutable_files
from binlake.spark.backfill_job import run_backfill
from binlake.spark.runtime.session import spark_session
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.state.store import StreamBatch
from binlake.testing import demo
from binlake.testing.compare import compare
from binlake.testing.private_server import PrivateMariaDB, private_mariadb
from binlake.testing.workload import Workload

sys.path.insert(0, str(Path(__file__).parent))
from snapshot import PeakRss  # a sibling benchmark script

TABLE = "shop.orders"


def _config(server: PrivateMariaDB, work: str) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "pipeline": {"name": "bench", "work_dir": f"{work}/bench", "parallelism": 2,
                         "spark": {"master": "local[2]"}},
            "source": {"hostname": "127.0.0.1", "port": server.port, "username": server.user,
                       "password": server.password, "tables": [r"shop\..*"],
                       "chunk_key_columns": {"shop.page_views": "customer_id"}},
            "stream": {"trigger_interval_s": 2},
        }
    )  # fmt: skip


def _summary(batches: list[StreamBatch]) -> dict[str, Any]:
    if not batches:
        return {"batches": 0}
    seconds = sorted(b.seconds for b in batches)
    lags = sorted(b.lag_s for b in batches if b.lag_s is not None)
    return {
        "batches": len(batches),
        "batch_seconds_p50": round(statistics.median(seconds), 2),
        "batch_seconds_max": round(seconds[-1], 2),
        "lag_s_p50": round(statistics.median(lags), 2) if lags else None,
        "lag_s_max": round(lags[-1], 2) if lags else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--report", default="bench/backfill.html")
    args = parser.parse_args()
    cache_immutable_files()  # as binlake's jobs start (spark/entry.py): the one patch of pyiceberg
    batches: list[tuple[float, StreamBatch]] = []
    with private_mariadb() as server, tempfile.TemporaryDirectory(prefix="binlake-bench-") as work:
        demo.load(server.admin_connection, args.rows)
        config = _config(server, work)
        plan(config)
        spark = spark_session(config, "bench")
        try:
            run_snapshot(config, spark)
            run_stream(config, spark, until_caught_up=True)
            stop = threading.Event()
            stream = threading.Thread(
                target=run_stream,
                args=(config, spark),
                kwargs={"progress": lambda b, _: batches.append((time.monotonic(), b)), "stop": stop},
            )
            workload = Workload(server.admin_connection, database="shop", rate=args.rate, txn_size=2).start()
            with PeakRss() as memory:
                stream.start()
                time.sleep(20)  # the steady state before the backfill
                started = time.monotonic()
                report = run_backfill(config, spark, "bench", tables=[TABLE])
                staged = time.monotonic()
                wait_applied(config, "bench", timeout_s=1800, poll_s=0.5)
                applied = time.monotonic()
                time.sleep(6)
            stats = workload.stop()
            time.sleep(8)  # catch up after the workload
            stop.set()
            stream.join(300)
            run_stream(config, spark, until_caught_up=True)
            equal = all(r.equal for r in compare(config))
        finally:
            spark.stop()
    before = [b for t, b in batches if t < started]
    during = [b for t, b in batches if started <= t <= applied + 2]
    result = {
        "benchmark": "backfill",
        "table": TABLE,
        "rows": report.rows,
        "units": report.units,
        "stage_seconds": round(staged - started, 2),
        "stage_rows_per_s": round(report.rows / (staged - started)),
        "applied_after_staged_s": round(applied - staged, 2),
        "stream_before": _summary(before),
        "stream_during_backfill": _summary(during),
        "backfilled_rows_applied": sum(c.get("backfilled", 0) for b in during for c in b.changes.values()),
        "driver_rss_growth_mb": round(memory.peak - memory.before, 1),
        "workload_statements": stats.total,
        "sink_equals_source": equal,
        "master": "local[2]",
    }
    print(json.dumps(result))
    Path(args.report).write_text(_html(result, batches, started, staged, applied))


def _html(result: dict[str, Any], batches: list[tuple[float, StreamBatch]], *marks: float) -> str:
    origin = batches[0][0] if batches else 0.0
    rows = "".join(
        f"<tr><td>{t - origin:.1f}</td><td>{b.batch_id}</td><td>{b.rows:,}</td><td>{b.seconds:.2f}</td>"
        f"<td>{'' if b.lag_s is None else f'{b.lag_s:.1f}'}</td>"
        f"<td>{sum(c.get('backfilled', 0) for c in b.changes.values()):,}</td></tr>"
        for t, b in batches
    )
    started, staged, applied = (m - origin for m in marks)
    return (
        "<!doctype html><meta charset=utf-8><title>binlake backfill benchmark</title>"
        "<style>body{font:14px sans-serif;margin:2em}td,th{padding:2px 8px;text-align:right}</style>"
        f"<h1>Backfill of {html.escape(TABLE)} while the stream runs</h1>"
        f"<pre>{html.escape(json.dumps(result, indent=2))}</pre>"
        f"<p>backfill started at {started:.1f} s, staged at {staged:.1f} s, applied at {applied:.1f} s</p>"
        "<table><tr><th>s</th><th>batch</th><th>changes</th><th>batch s</th><th>lag s</th>"
        f"<th>backfilled rows</th></tr>{rows}</table>"
    )


if __name__ == "__main__":
    main()
