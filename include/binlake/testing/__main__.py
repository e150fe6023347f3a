"""``python -m binlake.testing``: the demo server and workload, for ``make demo`` and benchmarks.

python -m binlake.testing up [--rows N] [--reload]   start the demo MariaDB and load `shop`
python -m binlake.testing down                         stop it
python -m binlake.testing load --host H --user U [--rows N]   load `shop` into a server of yours
                                                       (password from $BINLAKE_LOAD_PASSWORD)
python -m binlake.testing workload --rate R --seconds S   write to `shop` while a pipeline runs
python -m binlake.testing compare --config FILE        source versus sink, table by table
python -m binlake.testing ddl-oracle --corpus FILE [--json]   binlake's DDL parser against MariaDB
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

from binlake.config.pipeline_file import load_config
from binlake.errors import BinlakeError
from binlake.testing import demo_server
from binlake.testing.compare import compare, print_comparison
from binlake.testing.workload import Workload


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m binlake.testing")
    parser.add_argument("--dir", type=Path, default=Path(".binlake/demo"), help="demo server folder")
    commands = parser.add_subparsers(dest="command", required=True)
    up = commands.add_parser("up", help="start the demo MariaDB and load the demo database")
    up.add_argument("--rows", type=int, default=100_000, help="rows over all demo tables")
    up.add_argument("--reload", action="store_true", help="drop and reload the demo database")
    commands.add_parser("down", help="stop the demo MariaDB")
    load = commands.add_parser("load", help="load the demo database into a running MySQL/MariaDB")
    load.add_argument("--host", required=True)
    load.add_argument("--port", type=int, default=3306)
    load.add_argument("--user", required=True, help="a user that may create the database")
    load.add_argument("--rows", type=int, default=100_000, help="rows over all demo tables")
    load.add_argument("--wait", type=float, default=120.0, help="seconds to wait for the server")
    work = commands.add_parser("workload", help="run inserts/updates/deletes against the demo database")
    work.add_argument("--rate", type=float, default=200.0, help="statements per second")
    work.add_argument("--seconds", type=float, default=30.0)
    work.add_argument("--txn-size", type=int, default=1)
    work.add_argument("--seed", type=int, default=7)
    check = commands.add_parser("compare", help="compare every captured table's source and sink rows")
    check.add_argument("--config", required=True, help="pipeline YAML file")
    oracle = commands.add_parser(
        "ddl-oracle", help="replay a DDL corpus on a private MariaDB against binlake's parser"
    )
    oracle.add_argument("--corpus", required=True, type=Path, help="corpus file (shared/ddl-corpus format)")
    oracle.add_argument(
        "--json", action="store_true", help="every wrong, crashed and refused statement as JSON"
    )
    oracle.add_argument("--limit", type=int, default=None, help="only the first N contexts")
    args = parser.parse_args(argv)

    try:
        if args.command == "up":
            demo_server.up(args.dir, args.rows, args.reload)
        elif args.command == "load":
            demo_server.load_into(args.host, args.port, args.user, args.rows, args.wait)
        elif args.command == "down":
            print("demo MariaDB stopped" if demo_server.down(args.dir) else "demo MariaDB was not running")
        elif args.command == "ddl-oracle":
            from binlake.testing import ddl_oracle

            return ddl_oracle.main(args.corpus, args.json, args.limit)
        elif args.command == "compare":
            results = compare(load_config(args.config))
            print_comparison(results)
            return 0 if all(r.equal for r in results) else 1
        else:
            workload = Workload(
                lambda: demo_server.connect_admin(args.dir),
                rate=args.rate,
                txn_size=args.txn_size,
                seed=args.seed,
            )
            print(json.dumps(workload.run(args.seconds).as_dict()))
    except BinlakeError as e:
        print(f"python -m binlake.testing {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
