"""binlake verify's rate against the snapshot's on the same tables, as JSON.

    .venv/bin/python bench/verify.py [--rows 1000000]

Loads the demo database into a private MariaDB, snapshots it on Spark ``local[2]`` (its rows/s: cold,
and the median of ``--runs`` warm pipelines), lets the stream pass the last snapshot, then verifies
every table: once with no row hashes kept (``first_verify``: every data file hashed), then ``--runs``
times keeping them (``verify.row_hashes``: the files written since alone — none here): the median's
rows/s overall, and of the last run's two reads, the server's chunk sums and the sink's rows. The
issue's figure: verify rows/s vs the snapshot's rows/s in the same run; every chunk must come out
equal. The reference, in the same run: verify at the snapshot's chunk size (``verify.chunk_bytes``
= ``source.chunk_bytes``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from binlake.planner import plan
from binlake.sink.pyiceberg_internals import cache_immutable_files
from binlake.spark.runtime.session import spark_session
from binlake.spark.snapshot_job import run_snapshot
from binlake.spark.stream_job import run_stream
from binlake.testing import demo
from binlake.testing.private_server import private_mariadb
from binlake.verify.verification import verify

sys.path.insert(0, str(Path(__file__).parent))
from snapshot import PeakRss, _config  # a sibling benchmark script


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=None, help="rows per chunk (default: by bytes)")
    parser.add_argument("--runs", type=int, default=3, help="warm snapshots and verifications (medians)")
    args = parser.parse_args()
    cache_immutable_files()  # as binlake's jobs start (spark/entry.py): the one patch of pyiceberg
    with private_mariadb() as server, tempfile.TemporaryDirectory(prefix="binlake-bench-") as work:
        demo.load(server.admin_connection, args.rows)
        server.execute("ANALYZE TABLE " + ", ".join(f"shop.`{t}`" for t in demo.COLUMNS))
        spark = None
        rates = {}
        try:
            # "cold" includes starting Spark's Python workers; "warm" is a second pipeline on the
            # same session (the steady rate of a long snapshot): both, as bench/snapshot.py does.
            for run in ["cold"] + [f"warm{i}" for i in range(args.runs)]:
                config = _config(server, work, run, args.chunk_size)
                plan(config)
                spark = spark or spark_session(config, "bench")
                started = time.monotonic()
                snapshot = run_snapshot(config, spark)
                rates[run] = snapshot.rows / (time.monotonic() - started)
            rates = {"cold": rates.pop("cold"), "warm": statistics.median(rates.values())}
            run_stream(config, spark, until_caught_up=True)  # the stream passes the warm snapshot
        finally:
            if spark is not None:
                spark.stop()
        # The reference in the same run: verify at the snapshot's chunks (as before verify had its own).
        coarse = config.model_copy(
            update={"verify": config.verify.model_copy(update={"chunk_bytes": config.source.chunk_bytes})}
        )
        started = time.monotonic()
        reference = verify(coarse, "bench-snapshot-chunks")
        reference_s = time.monotonic() - started
        # The first verification hashes every data file; later ones only the files written since
        # (none here): both, each with its own reads' rates.
        shutil.rmtree(config.verify_hashes_dir, ignore_errors=True)
        with PeakRss() as memory:
            started = time.monotonic()
            first = verify(config, "bench-first")
            first_s = time.monotonic() - started
            times = []
            for _ in range(args.runs):
                started = time.monotonic()
                report = verify(config, "bench")
                times.append(time.monotonic() - started)
        verify_s = statistics.median(times)
    rows = sum(t.rows for t in report.tables)
    source_s = sum(t.source_seconds for t in report.tables)
    sink_s = sum(t.sink_seconds for t in report.tables)
    first_source_s = sum(t.source_seconds for t in first.tables)
    first_sink_s = sum(t.sink_seconds for t in first.tables)
    statuses = {s: sum(t.count(s) for t in report.tables) for s in ("equal", "drifted", "unverified")}
    print(
        json.dumps(
            {
                "benchmark": "verify",
                "rows": rows,
                "chunks": statuses,
                "snapshot_rows_per_s": {run: round(rate) for run, rate in rates.items()},
                "verify_rows_per_s": round(rows / verify_s),
                "ratio_to_snapshot": {run: round(rows / verify_s / rate, 3) for run, rate in rates.items()},
                "verify_seconds": round(verify_s, 2),
                "first_verify": {
                    "rows_per_s": round(rows / first_s),
                    "ratio_to_snapshot": {
                        run: round(rows / first_s / rate, 3) for run, rate in rates.items()
                    },
                    "source_sums_rows_per_s": round(rows / first_source_s) if first_source_s else None,
                    "sink_hash_rows_per_s": round(rows / first_sink_s) if first_sink_s else None,
                    "all_equal": first.clean,
                },
                "verify_chunks": len(report.verdicts),
                "at_snapshot_chunks": {
                    "chunks": len(reference.verdicts),
                    "verify_rows_per_s": round(rows / reference_s),
                    "all_equal": reference.clean,
                },
                "source_sums_rows_per_s": round(rows / source_s) if source_s else None,
                "sink_hash_rows_per_s": round(rows / sink_s) if sink_s else None,
                "driver_rss_growth_mb": round(memory.peak - memory.before, 1),
                "master": "local[2]",
            }
        )
    )


if __name__ == "__main__":
    main()
