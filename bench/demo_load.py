"""How fast the demo database loads: rows/s per table and in all, as JSON on stdout.

    .venv/bin/python bench/demo_load.py --rows 1000000

Starts its own private MariaDB (binlog on, as a real source), loads the demo database once and
prints one JSON object. The goal from the foundation issue: 1M rows in about a minute.
"""

from __future__ import annotations

import argparse
import json
import time

from binlake.testing import demo
from binlake.testing.private_server import private_mariadb


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=2000)
    args = parser.parse_args()
    tables: dict[str, dict[str, float]] = {}

    def progress(table: str, rows: int, seconds: float) -> None:
        tables[table] = {"rows": rows, "seconds": round(seconds, 3), "rows_per_s": round(rows / seconds)}

    with private_mariadb() as server:
        started = time.monotonic()
        size = demo.load(server.admin_connection, args.rows, batch=args.batch, progress=progress)
        seconds = time.monotonic() - started
        binlog_bytes = sum(int(size) for _, size in server.query("SHOW BINARY LOGS"))
    print(
        json.dumps(
            {
                "benchmark": "demo_load",
                "rows": size.total,
                "seconds": round(seconds, 2),
                "rows_per_s": round(size.total / seconds),
                "binlog_bytes": binlog_bytes,
                "tables": tables,
            }
        )
    )


if __name__ == "__main__":
    main()
