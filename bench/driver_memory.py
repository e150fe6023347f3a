"""The stream driver's peak memory for one micro-batch of 100k and of 1M row changes, as JSON.

    .venv/bin/python bench/driver_memory.py [--small 100000] [--large 1000000] [--modes executors,driver]

Issue 22's goal: the driver's peak RSS within 1.2x between the two batches, when a merge-on-read
table's share is merged on the executors (``stream/shares/bucket_merge.py``): only files, keys and counts
come to the driver. Each batch runs in a fresh process (peak RSS is a process's lifetime high),
on one private MariaDB: the changes (``bench/stream.py``'s mix: inserts, updates, deletes) are
written first, then ``binlake stream --until-caught-up`` reads them as one batch
(``stream.max_bytes_per_batch`` above the range) into a merge-on-read table. ``driver`` mode
(``stream.executor_merge_from: null``) is the reference: the whole batch comes to the driver.

Reported per run: the Python driver's peak RSS (the JVM and Spark's Python workers are other
processes), the batch's seconds and rows/s, and ``growth``: large ÷ small peak RSS per mode.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from stream import TABLE, _config, _head, _single_reader, _write_changes

from binlake.config import PipelineConfig
from binlake.offsets import BinlogOffset
from binlake.sink.pyiceberg_internals import cache_immutable_files
from binlake.spark.runtime.session import spark_session
from binlake.spark.stream_job import run_stream
from binlake.testing.private_server import PrivateMariaDB, private_mariadb


def _batch(raw: dict[str, Any], out: Any) -> None:
    """One stream run over the range (in a process of its own): its peak RSS, seconds, rows."""
    config = PipelineConfig.model_validate(raw)
    spark = spark_session(config, "bench-driver-memory")
    try:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        report = run_stream(config, spark, until_caught_up=True)
        seconds = time.monotonic() - started
    finally:
        spark.stop()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    out.put({"rows": report.rows, "batches": report.batches, "seconds": seconds,
             "rss_before_mb": before / 1024, "peak_rss_mb": peak / 1024})  # fmt: skip


def _run(server: PrivateMariaDB, work: str, name: str, changes: int, mode: str) -> dict[str, Any]:
    database = f"bench_{name}"
    server.execute(f"DROP DATABASE IF EXISTS {database}", f"CREATE DATABASE {database}")
    server.execute(TABLE.replace("bench.", f"{database}."))
    start: BinlogOffset = _head(server)
    _write_changes(server, changes, 1000, f"{database}.events")
    end = _head(server)
    config = _config(server, work, name, [rf"{database}\.events"], 10, mor=True, start=start)
    raw = config.model_dump(mode="json", exclude_none=True)
    raw["source"]["password"] = server.password
    raw["stream"]["max_bytes_per_batch"] = 4 << 30
    raw["stream"]["executor_merge_from"] = 0 if mode == "executors" else None
    raw["stream"]["compact"] = False  # the batch's own cost only
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    process = context.Process(target=_batch, args=(raw, out))
    process.start()
    result: dict[str, Any] = out.get()
    process.join()
    decoded, reader_seconds = _single_reader(server, start, end)  # the same range, one process
    return {
        "mode": mode,
        "changes": changes,
        "rows": result["rows"],
        "batches": result["batches"],
        "seconds": round(result["seconds"], 2),
        "rows_per_s": round(result["rows"] / result["seconds"]),
        "rss_before_mb": round(result["rss_before_mb"]),
        "peak_rss_mb": round(result["peak_rss_mb"]),
        "single_reader_rows_per_s": round(decoded / reader_seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--small", type=int, default=100_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    parser.add_argument("--modes", default="executors,driver")
    args = parser.parse_args()
    cache_immutable_files()  # as binlake's jobs start (spark/entry.py): the one patch of pyiceberg
    runs = []
    with private_mariadb() as server, tempfile.TemporaryDirectory(prefix="binlake-bench-") as work:
        for mode in args.modes.split(","):
            for changes in (args.small, args.large):
                runs.append(_run(server, work, f"{mode}_{changes}", changes, mode))
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    growth = {}
    for mode in args.modes.split(","):
        small, large = (
            next(r for r in runs if r["mode"] == mode and r["changes"] == n) for n in (args.small, args.large)
        )
        growth[mode] = round(large["peak_rss_mb"] / small["peak_rss_mb"], 2)
    print(json.dumps({"benchmark": "driver_memory", "master": "local[2]", "runs": runs, "growth": growth,
                      "goal_growth": 1.2}))  # fmt: skip


if __name__ == "__main__":
    main()
