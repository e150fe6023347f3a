"""spark-submit entry point of a backfill: stage chunks of chosen tables, print a JSON summary last.

    spark-submit --master spark://host:7077 --py-files binlake.zip jobs/backfill.py \
        --config pipeline.yaml --id backfill-1 [--table db.t] [--from 1000 --to 2000] [--chunk-size N]

The running stream applies the staged chunks (it is the only writer of the sink tables).
"""

from __future__ import annotations

import argparse
import json
import sys

from binlake.config import load_config, source_from_env
from binlake.errors import BinlakeError
from binlake.logs import register_secret, setup_logging
from binlake.spark.backfill_job import KeyRange, print_progress, run_backfill
from binlake.spark.session import spark_session


def main() -> int:
    parser = argparse.ArgumentParser(prog="jobs/backfill.py")
    parser.add_argument("--config", required=True)
    parser.add_argument(
        "--source-from-env",
        action="store_true",
        help="take the source's host, port, user and password from BINLAKE_SOURCE_* (Airflow passes them)",
    )
    parser.add_argument("--id", required=True, help="backfill id (an existing one resumes)")
    parser.add_argument("--table", action="append", default=[])
    parser.add_argument("--from", dest="key_from", type=int)
    parser.add_argument("--to", dest="key_to", type=int)
    parser.add_argument("--chunk-size", type=int)
    args = parser.parse_args()
    setup_logging("INFO")
    try:
        config = load_config(
            args.config, source_overrides=source_from_env() if args.source_from_env else None
        )
        for secret in config.secrets():
            register_secret(secret)
        spark = spark_session(config, "backfill")
        try:
            report = run_backfill(
                config,
                spark,
                args.id,
                args.table or None,
                KeyRange(args.key_from, args.key_to),
                args.chunk_size,
                print_progress,
            )
        finally:
            spark.stop()
    except BinlakeError as e:
        print(f"backfill: error: {e}", file=sys.stderr)
        return e.exit_code
    print(json.dumps(report.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
