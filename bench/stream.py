"""Stream catch-up rate and steady-state lag, binlog → Iceberg on Spark local[2], as JSON (+ HTML).

    .venv/bin/python bench/stream.py [--changes 1000000] [--steady-seconds 300] [--report out.html]
        [--catch-up-only | --steady-only]

1. **Catch-up**: writes ``--changes`` row changes (inserts, updates, deletes in transactions of
   ``--txn-rows`` rows) while no stream runs, then runs ``binlake stream --until-caught-up`` over
   them into Iceberg (the Spark application's first query, as a scheduled catch-up job's is), and
   — in the same run, over the same binlog range — python-mysql-replication decoding every row in
   one process (what a single-reader CDC tool does). Goal: catch-up at least
   4x the single reader. Also reported: the seconds until the first batch began (the query's
   start) and the rate over the batches alone (what a long backlog sees).
2. **Steady lag**: a continuous stream while a workload writes ``--steady-share`` (0.5) of the
   single reader's rate just measured (or ``--steady-rate`` changes/s) in ten-row transactions for
   ``--steady-seconds``; lag per micro-batch = batch end - newest event time. Goal: p99 at most
   trigger interval + 5 s, no upward trend. The load runs in the server (a stored procedure,
   ``--steady-load server``) so that it costs the two cores no client; ``--steady-load shop`` is
   the demo workload on eight tables, from Python.

Prints one JSON line; writes an HTML page with the figures and the lag over time.
"""

from __future__ import annotations

import argparse
import datetime as dt
import html
import json
import logging
import re
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from binlake.config import PipelineConfig, TransformRule
from binlake.offsets import BinlogOffset
from binlake.sink.pyiceberg_internals import cache_immutable_files
from binlake.source.binlog.scan import transactions
from binlake.spark.runtime.session import spark_session
from binlake.spark.stream_job import run_stream
from binlake.state.store import StateStore, StreamBatch
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB, private_mariadb
from binlake.testing.server_workload import ServerWorkload
from binlake.testing.workload import Workload

TABLE = """CREATE TABLE bench.events (
  id BIGINT PRIMARY KEY, customer_id INT NOT NULL, amount DECIMAL(12,2) NOT NULL,
  status VARCHAR(16) NOT NULL, note VARCHAR(200), created_at DATETIME(6) NOT NULL)"""


#: The steady part's table (server-side load) and its rows when the stream starts.
STEADY_TABLE, STEADY_ROWS = "bench.steady", 100_000


def _config(
    server: PrivateMariaDB,
    work: str,
    name: str,
    tables: list[str],
    interval: float,
    mode: str | None = None,
    start: BinlogOffset | None = None,
    executor_merge_from: int | str | None = "auto",
) -> PipelineConfig:
    startup: dict[str, Any] = {"startup_mode": "latest-offset"}
    if start is not None:
        offset = {"file": start.file, "pos": start.pos}
        startup = {"startup_mode": "specific-offset", "startup_offset": offset}
    return PipelineConfig.model_validate(
        {
            "pipeline": {
                "name": name,
                "work_dir": f"{work}/{name}",
                "parallelism": 2,
                "spark": {"master": "local[2]"},
            },
            "source": {
                "hostname": "127.0.0.1",
                "port": server.port,
                "username": server.user,
                "password": server.password,
                "tables": tables,
                "chunk_key_columns": {"shop.page_views": "customer_id"},
                **startup,
            },
            "stream": {
                "trigger_interval_s": interval,
                "executor_merge_from": executor_merge_from,
            },
            "sink": {"table_properties": {"write.merge.mode": mode} if mode else {}},
        }
    )


def _head(server: PrivateMariaDB) -> BinlogOffset:
    with server.admin_connection() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return BinlogOffset(str(row[0]), int(row[1]))


def _write_changes(
    server: PrivateMariaDB, changes: int, txn_rows: int, table: str = "bench.events"
) -> dict[str, int]:
    """About ``changes`` row changes of ``table``: 50 % inserts, 35 % updates, 15 % deletes."""
    inserts, updates = changes * 50 // 100, changes * 35 // 100
    deletes = changes - inserts - updates
    statements = []
    for low in range(1, inserts + 1, txn_rows):
        high = min(inserts, low + txn_rows - 1)
        statements.append(
            # Hex text: a note that compresses about as badly as real text does under lz4.
            f"INSERT INTO {table} SELECT seq, seq % 5000, seq / 100, 'new', "
            "LEFT(CONCAT(MD5(seq), MD5(seq + 1), MD5(seq + 2), MD5(seq + 3), MD5(seq + 4)), 150), "
            f"'2026-01-01' + INTERVAL seq SECOND FROM seq_{low}_to_{high}"
        )
    for low in range(1, updates + 1, txn_rows):
        high = min(updates, low + txn_rows - 1)
        statements.append(
            f"UPDATE {table} SET status = 'paid', amount = amount + 1 WHERE id BETWEEN {low} AND {high}"
        )
    for low in range(inserts - deletes + 1, inserts + 1, txn_rows):
        high = min(inserts, low + txn_rows - 1)
        statements.append(f"DELETE FROM {table} WHERE id BETWEEN {low} AND {high}")
    server.execute(*statements, database=table.split(".")[0])
    return {"inserts": inserts, "updates": updates, "deletes": deletes}


def _single_reader(server: PrivateMariaDB, start: BinlogOffset, end: BinlogOffset) -> tuple[int, float]:
    """python-mysql-replication alone, one process: decode every row of the range."""
    stream = BinLogStreamReader(
        connection_settings={
            "host": "127.0.0.1",
            "port": server.port,
            "user": server.user,
            "password": server.password,
        },
        server_id=7001,
        log_file=start.file,
        log_pos=start.pos,
        resume_stream=True,
        blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        enable_logging=False,
    )
    rows, started = 0, time.monotonic()
    for event in stream:
        if BinlogOffset(stream.log_file, stream.log_pos) > end:
            break
        rows += len(event.rows)
    stream.close()
    return rows, time.monotonic() - started


def _header_scan(config: Any, start: BinlogOffset, end: BinlogOffset) -> tuple[int, float]:
    """binlake's header-only scan of the range (transaction boundaries and statement texts): what
    the planning side runs per batch and the snapshot runs once over its span before the switch."""
    started = time.monotonic()
    found = sum(1 for _ in transactions(config.source, config.source.server_id.end, start, end))
    return found, time.monotonic() - started


def _catch_up(
    server: PrivateMariaDB,
    work: str,
    spark: Any,
    changes: int,
    txn_rows: int,
    mode: str | None = None,
    executor_merge_from: int | str | None = "auto",
    transform: bool = False,
) -> dict[str, Any]:
    server.execute("CREATE DATABASE IF NOT EXISTS bench", TABLE)
    start = _head(server)
    written = _write_changes(server, changes, txn_rows)
    end = _head(server)
    # The stream's first query in this Spark application, as a scheduled catch-up job runs: its
    # Python workers start cold (a query run before would have left them warm).
    config = _config(server, work, "catchup", [r"bench\.events"], 10, mode, start, executor_merge_from)
    batches: list[StreamBatch] = []
    phases = _PhaseLog()
    began = dt.datetime.now(dt.UTC)
    started = time.monotonic()
    try:
        report = run_stream(config, spark, until_caught_up=True, progress=lambda b, _: batches.append(b))
    finally:
        phases.close()
    seconds = time.monotonic() - started
    rates = _with_transform(server, work, spark, start, mode, executor_merge_from) if transform else {}
    decoded, reader_seconds = _single_reader(server, start, end)
    boundaries, scan_seconds = _header_scan(config, start, end)
    rate, reader_rate = report.rows / seconds, decoded / reader_seconds
    # Where the time went: the query's start (tables, start offset, Spark's query and its Python
    # workers, the first plan) until the first batch began, then the batches one after another.
    first = batches[0].finished_at - dt.timedelta(seconds=batches[0].seconds) if batches else began
    in_batches = (batches[-1].finished_at - first).total_seconds() if batches else 0.0
    return {
        "changes_written": written,
        "row_changes_read": report.rows,
        "batches": report.batches,
        "seconds": round(seconds, 2),
        "rows_per_s": round(rate),
        "single_reader_rows": decoded,
        "single_reader_seconds": round(reader_seconds, 2),
        "single_reader_rows_per_s": round(reader_rate),
        "ratio": round(rate / reader_rate, 2),
        "goal_ratio": 4.0,
        "header_scan_transactions": boundaries,
        "header_scan_seconds": round(scan_seconds, 2),
        "header_scan_vs_single_reader": round(reader_seconds / scan_seconds, 2) if scan_seconds else None,
        "start_s": round((first - began).total_seconds(), 2),
        "batches_s": round(in_batches, 2),
        "rows_per_s_in_batches": round(report.rows / in_batches) if in_batches else None,
        "ratio_in_batches": round(report.rows / in_batches / reader_rate, 2) if in_batches else None,
        "batch_series": [(b.batch_id, b.rows, round(b.seconds, 2)) for b in batches],
        "phase_seconds": phases.totals(),
        **rates,
    }


#: A transform of the benchmark's table: a dropped column, computed ones, a filter that changes
#: its verdict on updates (``status`` moves from 'new' to 'paid').
TRANSFORM = {
    "source_table": r"bench\.events",
    "projection": "id, customer_id, amount * 100 AS cents, UPPER(status) AS status, created_at, "
    "__op_ts__ AS changed_at",
    "filter": "status <> 'paid' AND amount > 1",
}


def _with_transform(
    server: PrivateMariaDB,
    work: str,
    spark: Any,
    start: BinlogOffset,
    mode: str | None,
    merge_from: int | str | None,
) -> dict[str, Any]:
    """The same range again into two new pipelines, warm: without and with ``TRANSFORM``."""
    rates = {}
    for name in ("plain", "transformed"):
        config = _config(server, work, name, [r"bench\.events"], 10, mode, start, merge_from)
        if name == "transformed":
            config = config.model_copy(update={"transform": [TransformRule.model_validate(TRANSFORM)]})
        started = time.monotonic()
        report = run_stream(config, spark, until_caught_up=True)
        rates[name] = report.rows / (time.monotonic() - started)
    return {
        "warm_rows_per_s": round(rates["plain"]),
        "transformed_rows_per_s": round(rates["transformed"]),
        "transform_ratio": round(rates["transformed"] / rates["plain"], 3),
        "goal_transform_ratio": 0.85,
    }


def _steady(
    server: PrivateMariaDB,
    work: str,
    spark: Any,
    rate: float,
    seconds: float,
    interval: float,
    mode: str | None,
    load: str = "server",
) -> dict[str, Any]:
    if load == "server":
        # Ten-row transactions run by the server itself (a stored procedure): a client on the
        # same two cores as the stream could not write fast enough to test it.
        server.execute("CREATE DATABASE IF NOT EXISTS bench")
        workload: Any = ServerWorkload(server.admin_connection, STEADY_TABLE, rate)
        workload.install()
        workload.seed(STEADY_ROWS)
        tables = [re.escape(STEADY_TABLE)]
    else:
        demo.load(server.admin_connection, 50_000)
        workload, tables = Workload(server.admin_connection, rate=rate, txn_size=10), [r"shop\..*"]
    config = _config(server, work, "steady", tables, interval, mode)
    phases = _PhaseLog()
    stop = threading.Event()
    stream = threading.Thread(target=lambda: run_stream(config, spark, stop=stop), daemon=True)
    stream.start()
    store = StateStore(config.pipeline.resolved_state_uri)
    while store.offsets("steady").load("stream") is None:
        time.sleep(0.5)
    time.sleep(interval)  # the first trigger has run
    stats = workload.run(seconds)
    time.sleep(2 * interval)
    stop.set()
    stream.join(120)
    phases.close()
    batches = [
        b for b in store.stream_history("steady").batches(limit=100_000) if b.lag_s is not None and b.rows
    ]
    batches.sort(key=lambda b: b.finished_at)
    lags = [b.lag_s for b in batches if b.lag_s is not None]
    cuts = statistics.quantiles(lags, n=100, method="inclusive") if len(lags) >= 2 else lags * 99
    return {
        "workload_changes_per_s": round(stats.total / stats.seconds),
        "seconds": seconds,
        "trigger_interval_s": interval,
        "batches": len(batches),
        "lag_p50_s": round(statistics.median(lags), 2) if lags else None,
        "lag_p99_s": round(cuts[98], 2) if lags else None,
        "lag_max_s": round(max(lags), 2) if lags else None,
        # An upward trend: the mean lag of the last third of the batches over the first third's.
        "lag_trend_last_vs_first_third": (
            round(statistics.mean(lags[-len(lags) // 3 :]) / statistics.mean(lags[: len(lags) // 3]), 2)
            if len(lags) >= 6
            else None
        ),
        "workload_asked_changes_per_s": round(rate),
        "workload": "stored procedure, 5 inserts + 3 updates + 2 deletes per transaction, "
        f"{STEADY_TABLE} ({STEADY_ROWS:,} rows at the start)"
        if load == "server"
        else "demo shop, 10 statements per transaction, from Python",
        "goal_p99_s": interval + 5,
        "merge_mode": mode or "default (keyed tables: merge-on-read)",
        # Median seconds per batch in each phase: binlake's (stream.batch_clock) and Spark's own.
        "phases_median_s": phases.medians(),
        "lag_series": [
            (round((b.finished_at - batches[0].finished_at).total_seconds(), 1), round(b.lag_s or 0, 2))
            for b in batches
        ],
    }


class _PhaseLog(logging.Handler):
    """Collects the per-batch phase timings the stream logs at INFO (``extra={"phases": …}``)."""

    LOGGERS = ("binlake.stream.apply", "binlake.spark.query_progress")

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.seen: dict[str, list[dict[str, float]]] = {"binlake": [], "spark": []}
        for name in self.LOGGERS:
            logger = logging.getLogger(name)
            logger.addHandler(self)
            logger.setLevel(min(logger.getEffectiveLevel(), logging.INFO))

    def emit(self, record: logging.LogRecord) -> None:
        phases = getattr(record, "phases", None)
        if phases:
            self.seen["spark" if record.name.endswith("query_progress") else "binlake"].append(phases)

    def close(self) -> None:
        for name in self.LOGGERS:
            logging.getLogger(name).removeHandler(self)
        super().close()

    def totals(self) -> dict[str, dict[str, float]]:
        """Each phase's seconds summed over the batches (where a catch-up's time went)."""
        out: dict[str, dict[str, float]] = {}
        for side, batches in self.seen.items():
            names = sorted({n for b in batches for n in b})
            out[side] = {n: round(sum(b.get(n, 0.0) for b in batches), 2) for n in names}
        return out

    def medians(self) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {}
        for side, batches in self.seen.items():
            names = {n for b in batches for n in b}
            out[side] = {
                n: round(statistics.median(b.get(n, 0.0) for b in batches), 3) for n in sorted(names)
            }
            out[side]["batches"] = len(batches)
        return out


def _svg(points: list[tuple[float, float]], goal: float) -> str:
    if not points:
        return "<p>no batches</p>"
    width, height = 720, 240
    max_x = max(x for x, _ in points) or 1
    max_y = max(max(y for _, y in points), goal) * 1.1
    scaled = " ".join(
        f"{40 + x / max_x * (width - 60):.1f},{height - 20 - y / max_y * (height - 40):.1f}"
        for x, y in points
    )
    goal_y = height - 20 - goal / max_y * (height - 40)
    return (
        f'<svg width="{width}" height="{height}" style="border:1px solid #ccc">'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{scaled}"/>'
        f'<line x1="40" x2="{width - 20}" y1="{goal_y:.1f}" y2="{goal_y:.1f}" '
        'stroke="#d62728" stroke-dasharray="6,4"/>'
        f'<text x="44" y="{goal_y - 4:.1f}" fill="#d62728" font-size="12">goal p99 {goal:g} s</text>'
        f'<text x="44" y="14" font-size="12">lag (s) per micro-batch over {max_x:.0f} s</text></svg>'
    )


def _html(result: dict[str, Any]) -> str:
    catch, steady = result["catch_up"], result["steady"]
    rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v))}</td></tr>"
        for section in (
            {k: v for k, v in catch.items() if k != "batch_series"},
            {k: v for k, v in steady.items() if k != "lag_series"},
        )
        for k, v in section.items()
    )
    batches = "".join(
        f"<tr><td>{n}</td><td>{r:,}</td><td>{s}</td><td>{r / s if s else 0:,.0f}</td></tr>"
        for n, r, s in catch.get("batch_series", [])
    )
    return (
        "<!doctype html><meta charset='utf-8'><title>binlake stream benchmark</title>"
        "<style>body{font-family:sans-serif;margin:2em}"
        "td{padding:2px 12px;border-bottom:1px solid #eee}</style>"
        f"<h1>binlake stream benchmark</h1>"
        f"<p>{html.escape(result['master'])}, {time.strftime('%Y-%m-%d %H:%M')}</p>"
        + (
            f"<h2>Catch-up: {catch['rows_per_s']:,} rows/s, {catch['ratio']}x the single reader "
            f"(goal {catch['goal_ratio']}x)</h2>"
            f"<p>{catch['start_s']} s until the first batch began, then {catch['batches_s']} s of batches "
            f"({catch['rows_per_s_in_batches']:,} rows/s, {catch['ratio_in_batches']}x).</p>"
            "<table><tr><th>batch</th><th>changes</th><th>seconds (read + apply)</th><th>rows/s</th></tr>"
            f"{batches}</table>"
            if catch
            else ""
        )
        + (
            f"<h2>Steady {steady['workload_changes_per_s']:,} changes/s into {steady['merge_mode']} tables: "
            f"lag p50 {steady['lag_p50_s']} s, p99 {steady['lag_p99_s']} s "
            f"(goal {steady['goal_p99_s']} s)</h2>"
            f"{_svg(steady['lag_series'], steady['goal_p99_s'])}"
            if steady
            else ""
        )
        + f"<table>{rows}</table>"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--txn-rows", type=int, default=1000)
    parser.add_argument("--steady-rate", type=float, default=2000)
    parser.add_argument(
        "--steady-share", type=float, default=0.5,
        help="steady workload at this share of the single reader's rows/s measured in the catch-up part "
        "(the goal's 0.5; 0: use --steady-rate); without the catch-up part --steady-rate is used",
    )  # fmt: skip
    parser.add_argument("--steady-seconds", type=float, default=300)
    parser.add_argument("--trigger-interval", type=float, default=5)
    parser.add_argument(
        "--merge-mode", choices=("copy-on-write", "merge-on-read"),
        help="the tables' write.merge.mode (default: none set, what a table gets by default: merge-on-read "
        "for keyed tables, whose large batches are merged on the executors)",
    )  # fmt: skip
    parser.add_argument(
        "--executor-merge-from", type=int,
        help="stream.executor_merge_from (-1: null, every batch merged in the driver; default auto: "
        "on local[2] the driver merges)",
    )  # fmt: skip
    parser.add_argument(
        "--transform", action="store_true",
        help="the catch-up's range again, warm, without and with a transform (transform_ratio)",
    )  # fmt: skip
    parser.add_argument(
        "--steady-load", choices=("server", "shop"), default="server",
        help="server: ten-row transactions run by a stored procedure on bench.steady (reaches the "
        "goal's rate on 2 cores); shop: the demo workload from Python (8 tables, slower)",
    )  # fmt: skip
    parser.add_argument("--steady-only", action="store_true", help="skip the catch-up part")
    parser.add_argument("--catch-up-only", action="store_true", help="skip the steady part")
    parser.add_argument("--report", type=Path, default=Path("bench/stream.html"))
    args = parser.parse_args()
    cache_immutable_files()  # as binlake's jobs start (spark/entry.py): the one patch of pyiceberg
    with private_mariadb() as server, tempfile.TemporaryDirectory(prefix="binlake-bench-") as work:
        # The stream job's session (``binlake stream``: its JVM's settings).
        spark = spark_session(_config(server, work, "session", [r"bench\..*"], 10), "stream")
        try:
            catch_up = (
                {}
                if args.steady_only
                else _catch_up(
                    server,
                    work,
                    spark,
                    args.changes,
                    args.txn_rows,
                    args.merge_mode,
                    "auto"
                    if args.executor_merge_from is None
                    else None
                    if args.executor_merge_from < 0
                    else args.executor_merge_from,
                    args.transform,
                )
            )
            reader = catch_up.get("single_reader_rows_per_s")
            rate = args.steady_share * reader if args.steady_share and reader else args.steady_rate
            steady = {} if args.catch_up_only else _steady(
                server, work, spark, rate, args.steady_seconds, args.trigger_interval, args.merge_mode,
                args.steady_load,
            )  # fmt: skip
            if steady and reader:
                steady["rate_share"] = round(steady["workload_changes_per_s"] / reader, 3)
                steady["rate_share_asked"] = args.steady_share or round(args.steady_rate / reader, 3)
        finally:
            spark.stop()
    result = {
        "benchmark": "stream", "master": "local[2]", "merge_mode": args.merge_mode,
        "executor_merge_from": args.executor_merge_from,
        "catch_up": catch_up, "steady": steady,
    }  # fmt: skip
    args.report.write_text(_html(result), encoding="utf-8")
    print(json.dumps({**result, "steady": {k: v for k, v in steady.items() if k != "lag_series"},
                      "catch_up": {k: v for k, v in catch_up.items() if k != "batch_series"},
                      "report": str(args.report)}))  # fmt: skip


if __name__ == "__main__":
    main()
