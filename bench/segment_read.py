"""One stream segment's read in one process, against the single reader on the same binlog, as JSON.

    .venv/bin/python bench/segment_read.py [--ops 20000] [--txn-size 10] [--profile out.prof]

The demo workload writes ``--ops`` statements in transactions of ``--txn-size`` (the steady
stream's shape: every transaction maps each table it writes again), then, over that binlog range:

- ``read_segment`` (what one stream task runs: binlake's reader, decoders and record builder; a
  table map is parsed once per distinct body, ``source.table_maps``);
- python-mysql-replication decoding every row in one process (the single reader).

``ratio`` = the segment's rows/s ÷ the single reader's. Small transactions cost per table map, not
per row: this is the bench for that cost (``table_maps`` says how many the range holds).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import json
import time
from typing import Any

from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.event import QueryEvent
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from binlake.config import PipelineConfig
from binlake.events import table_to_dict
from binlake.offsets import BinlogOffset
from binlake.source.binlog import table_maps
from binlake.source.server.connection import connect
from binlake.source.server.discovery import discover, list_tables
from binlake.spark.stream_task import read_segment
from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB, private_mariadb
from binlake.testing.workload import Workload


def _head(server: PrivateMariaDB) -> BinlogOffset:
    with server.admin_connection() as conn, conn.cursor() as cur:
        cur.execute("SHOW MASTER STATUS")
        row = cur.fetchone()
    return BinlogOffset(str(row[0]), int(row[1]))


def _single_reader(server: PrivateMariaDB, start: BinlogOffset, end: BinlogOffset) -> tuple[int, int, float]:
    """python-mysql-replication alone, parsing every table map as it does: (rows, table maps, seconds)."""
    table_maps.uninstall()
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
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent, TableMapEvent, QueryEvent],
        enable_logging=False,
    )
    rows = maps = 0
    started = time.monotonic()
    for event in stream:
        if BinlogOffset(stream.log_file, stream.log_pos) > end:
            break
        if isinstance(event, TableMapEvent):
            maps += 1
        elif not isinstance(event, QueryEvent):
            rows += len(event.rows)
    stream.close()
    return rows, maps, time.monotonic() - started


def _segment(
    config: PipelineConfig, start: BinlogOffset, end: BinlogOffset, schemas: str
) -> tuple[int, float]:
    started = time.monotonic()
    rows = 0
    for batch in read_segment(config, 0, start.to_dict(), end.to_dict(), schemas):
        envelope = batch.to_pydict()
        rows += sum(
            n for kind, n in zip(envelope["kind"], envelope["rows"], strict=True) if kind == "changes"
        )
    return rows, time.monotonic() - started


def _config(server: PrivateMariaDB) -> PipelineConfig:
    return PipelineConfig.model_validate(
        {
            "pipeline": {"name": "bench"},
            "source": {
                "hostname": "127.0.0.1",
                "port": server.port,
                "username": server.user,
                "password": server.password,
                "tables": [r"shop\..*"],
            },
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=20_000, help="workload statements")
    parser.add_argument("--txn-size", type=int, default=10, help="statements per transaction")
    parser.add_argument("--repeat", type=int, default=3, help="reads of each kind (the median counts)")
    parser.add_argument("--profile", help="write a cProfile of one segment read here")
    args = parser.parse_args()
    with private_mariadb() as server:
        demo.load(server.admin_connection, 20_000)
        start = _head(server)
        Workload(server.admin_connection, rate=0, txn_size=args.txn_size).run(max_ops=args.ops)
        end = _head(server)
        config = _config(server)
        with contextlib.closing(connect(config.source)) as conn:
            schemas = json.dumps({str(t.table): table_to_dict(t) for t in discover(conn, list_tables(conn))})
        singles = [_single_reader(server, start, end) for _ in range(args.repeat)]
        segments = [_segment(config, start, end, schemas) for _ in range(args.repeat)]
        if args.profile:
            cProfile.runctx("_segment(config, start, end, schemas)", globals(), locals(), args.profile)
    rows, maps, single_s = sorted(singles, key=lambda r: r[2])[len(singles) // 2]
    segment_rows, segment_s = sorted(segments, key=lambda r: r[1])[len(segments) // 2]
    result: dict[str, Any] = {
        "statements": args.ops,
        "txn_size": args.txn_size,
        "binlog_bytes": end.pos - start.pos if end.file == start.file else None,
        "table_maps": maps,
        "single_reader_rows": rows,
        "single_reader_seconds": round(single_s, 3),
        "single_reader_rows_per_s": round(rows / single_s),
        "segment_rows": segment_rows,
        "segment_seconds": round(segment_s, 3),
        "segment_rows_per_s": round(segment_rows / segment_s),
        "ratio": round((segment_rows / segment_s) / (rows / single_s), 2),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
