"""Chunk reader throughput against the native client, on the demo database, as JSON on stdout.

    .venv/bin/python bench/chunk_read.py [--rows 1000000] [--chunk-size 8096]

One process reads every demo table chunk by chunk (low watermark, SELECT into typed Arrow, high
watermark) and `mariadb --batch --quick` dumps the same tables, in the same run on the same server.
The issue's goal is a ratio of at least 0.4.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

from binlake.config import SourceConfig
from binlake.source.chunks.reader import ChunkReader
from binlake.source.chunks.splitter import ChunkSplitter
from binlake.source.server.connection import connect
from binlake.source.server.discovery import TableSelector, discover, list_tables
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB, private_mariadb


def native_rows_per_s(server: PrivateMariaDB, tables: list[str]) -> tuple[float, int]:
    client = shutil.which("mariadb") or shutil.which("mysql")
    if client is None:
        raise SystemExit("the native client (mariadb or mysql) is not installed")
    with tempfile.NamedTemporaryFile("w", suffix=".cnf", delete=False) as cnf:
        cnf.write(
            f"[client]\nuser={server.user}\npassword={server.password}\nhost=127.0.0.1\nport={server.port}\n"
        )
    try:
        rows, started = 0, time.monotonic()
        for table in tables:
            out = subprocess.run(
                [client, f"--defaults-extra-file={cnf.name}", "--batch", "--quick", "--skip-column-names",
                 "-e", f"SELECT * FROM shop.`{table}`"],
                check=True, stdout=subprocess.PIPE,
            ).stdout  # fmt: skip
            rows += out.count(b"\n")
        return rows / (time.monotonic() - started), rows
    finally:
        os.unlink(cnf.name)


def reader_rows_per_s(source: SourceConfig, chunk_size: int) -> tuple[float, int, int, dict[str, Any]]:
    with contextlib.closing(connect(source)) as conn:
        schemas = discover(conn, TableSelector(source.tables).select(list_tables(conn)))
        splitter = ChunkSplitter(conn, chunk_size)
        plans = [splitter.split(s, "customer_id" if not s.primary_key else None) for s in schemas]
    rows = chunks = 0
    per_table: dict[str, Any] = {}
    started = time.monotonic()
    for schema, plan in zip(schemas, plans, strict=True):
        table_started, table_rows = time.monotonic(), 0
        with ChunkReader(source, schema, 6400) as reader:
            for chunk in plan.chunks:
                table_rows += reader.read(chunk).row_count
                chunks += 1
        seconds = time.monotonic() - table_started
        per_table[schema.table.table] = {"rows": table_rows, "rows_per_s": round(table_rows / seconds)}
        rows += table_rows
    return rows / (time.monotonic() - started), rows, chunks, per_table


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--chunk-size", type=int, default=8096)
    args = parser.parse_args()
    with private_mariadb() as server:
        demo.load(server.admin_connection, args.rows)
        server.execute("ANALYZE TABLE " + ", ".join(f"shop.`{t}`" for t in demo.COLUMNS))
        source = SourceConfig(
            hostname="127.0.0.1", port=server.port, username=server.user,
            password=server.password, tables=[r"shop\..*"], chunk_size=args.chunk_size,  # type: ignore[arg-type]
        )  # fmt: skip
        native, native_rows = native_rows_per_s(server, list(demo.COLUMNS))
        reader, rows, chunks, per_table = reader_rows_per_s(source, args.chunk_size)
    print(
        json.dumps(
            {
                "benchmark": "chunk_read",
                "rows": rows,
                "chunks": chunks,
                "chunk_size": args.chunk_size,
                "reader_rows_per_s": round(reader),
                "native_client_rows_per_s": round(native),
                "native_client_rows": native_rows,
                "ratio": round(reader / native, 3),
                "goal_ratio": 0.4,
                "tables": per_table,
            }
        )
    )


if __name__ == "__main__":
    main()
