"""End-to-end snapshot rate MySQL → Iceberg on Spark local[2], against the native client, as JSON.

    .venv/bin/python bench/snapshot.py [--rows 1000000] [--transform] [--warm-runs 3]

Loads the demo database into a private MariaDB, plans it, runs the snapshot job on ``local[2]`` and
dumps the same tables with ``mariadb --batch --quick``, in the same run. Memory: the driver's peak
RSS (Python) and the largest executor Python worker's peak RSS, as reported by the tasks. The
issue's goals: at least 0.7 of the native client's rate warm, 0.4 cold; driver memory flat in the table size
(compare two --rows values). ``--transform`` adds a third run on the same session with
``TRANSFORMS`` (projections, computed columns and filters on orders and customers): its rows/s
within 15 % of the warm run's (``transform_ratio`` ≥ 0.85). ``chunk_split``: tables of ``--rows`` / 10
rows whose keys are not spread evenly, their largest chunk ÷ the median (``bench/chunk_split.py``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from binlake.config import PipelineConfig
from binlake.planner import plan
from binlake.sink.pyiceberg_internals import cache_immutable_files
from binlake.spark.runtime.session import spark_session
from binlake.spark.snapshot_job import run_snapshot
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB, private_mariadb

sys.path.insert(0, str(Path(__file__).parent))
from chunk_read import native_rows_per_s  # sibling benchmark scripts
from chunk_split import measure as chunk_spread

#: What a data engineer would ask of the demo: no PII, no cancelled orders, amounts in cents.
TRANSFORMS = [
    {
        "source_table": r"shop\.orders",
        "projection": "id, customer_id, status, total * 100 AS total_cents, UPPER(currency) AS currency, "
        "ordered_at, shipped_at, YEAR(ordered_at) AS ordered_year, __op_ts__ AS changed_at",
        "filter": "status <> 'cancelled' AND total > 0",
    },
    {
        "source_table": r"shop\.customers",
        "projection": "id, country, is_active, loyalty_points, credit_limit, created_at",
        "filter": "is_active",
    },
]


def _config(
    server: PrivateMariaDB,
    work: str,
    name: str,
    chunk_size: int | None,
    transform: bool = False,
    spark_conf: dict[str, str] | None = None,
    tables: list[str] | None = None,
) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "pipeline": {
                "name": name,
                "work_dir": f"{work}/{name}",
                "parallelism": 2,
                "spark": {"master": "local[2]", "conf": spark_conf or {}},
            },
            "source": {
                "hostname": "127.0.0.1",
                "port": server.port,
                "username": server.user,
                "password": server.password,
                "tables": tables or [r"shop\..*"],
                "chunk_size": chunk_size,
                "chunk_key_columns": {"shop.page_views": "customer_id"},
            },
            "transform": TRANSFORMS if transform else [],
        }
    )


class PeakRss:
    """Samples this process's resident memory while a block runs (the driver's own memory)."""

    def __enter__(self) -> PeakRss:
        self.before = self.peak = _rss_mb()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._stop.wait(0.02):
            self.peak = max(self.peak, _rss_mb())


def _rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=None, help="rows per chunk (default: by bytes)")
    parser.add_argument("--transform", action="store_true", help="a third run with TRANSFORMS")
    parser.add_argument("--warm-runs", type=int, default=3, help="warm runs; the median is reported")
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE",
        help="a Spark setting of the pipeline (the same bench with a feature off, for a reference)",
    )  # fmt: skip
    args = parser.parse_args()
    cache_immutable_files()  # as binlake's jobs start (spark/entry.py): the one patch of pyiceberg
    runs = {}
    with private_mariadb() as server, tempfile.TemporaryDirectory(prefix="binlake-bench-") as work:
        demo.load(server.admin_connection, args.rows)
        server.execute("ANALYZE TABLE " + ", ".join(f"shop.`{t}`" for t in demo.COLUMNS))
        spark = None
        try:
            # "cold" includes a fresh session's first job: the JVM's first run of the job's code
            # and the start of Spark's Python workers (~1 s on 2 cores);
            # "warm" is a second pipeline on the same session: the steady rate of a long snapshot.
            warm = [f"warm{i}" for i in range(args.warm_runs)]
            for run in ["cold", *warm, *(["warm_transformed"] if args.transform else [])]:
                config = _config(
                    server, work, run, args.chunk_size, run == "warm_transformed",
                    dict(c.split("=", 1) for c in args.conf),
                )  # fmt: skip
                plan(config)
                spark = spark or spark_session(config, "snapshot")  # the snapshot job's session
                with PeakRss() as memory:
                    started = time.monotonic()
                    report = run_snapshot(config, spark)
                runs[run] = (time.monotonic() - started, report, memory.peak - memory.before)
        finally:
            if spark is not None:
                spark.stop()
        # The median warm run stands for them all: runs differ by ±15 % on a shared machine.
        middle = sorted(warm, key=lambda r: runs[r][0])[len(warm) // 2]
        runs["warm"] = runs[middle]
        warm_seconds = [round(runs.pop(r)[0], 2) for r in warm]
        natives = [native_rows_per_s(server, list(demo.COLUMNS))[0] for _ in range(3)]
        native = statistics.median(natives)
        spread = chunk_spread(server, args.rows // 10, args.chunk_size or 8096)
    result: dict[str, object] = {"benchmark": "snapshot", "rows": args.rows, "master": "local[2]"}
    for run, (seconds, report, driver_growth) in runs.items():
        rate = report.rows / seconds
        result[run] = {
            "seconds": round(seconds, 2),
            "rows_per_s": round(rate),
            "ratio": round(rate / native, 3),
            "chunks": report.chunks_read,
            "driver_rss_growth_mb": round(driver_growth, 1),
        }
    result["warm"]["runs_seconds"] = warm_seconds  # type: ignore[index]
    if "warm_transformed" in runs:
        result["transform_ratio"] = round(
            result["warm_transformed"]["rows_per_s"] / result["warm"]["rows_per_s"], 3
        )  # type: ignore[index]
        result["goal_transform_ratio"] = 0.85
    result.update(
        native_client_rows_per_s=round(native),
        native_client_runs_rows_per_s=[round(n) for n in natives],
        goal_ratio_warm=0.7,
        goal_ratio_cold=0.4,
        executor_python_peak_rss_mb=round(max(r.max_executor_rss_kb for _, r, _ in runs.values()) / 1024, 1),
    )
    result["chunk_split"] = spread  # keys not spread evenly: largest chunk ÷ median (bench/chunk_split.py)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
