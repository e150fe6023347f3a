"""spark-submit entry point of the snapshot: read chunks into Iceberg, print a JSON summary last.

    spark-submit --master spark://host:7077 --py-files binlake.zip jobs/snapshot.py \
        --config pipeline.yaml [--table db.t] [--chunk db.t#17]
"""

from __future__ import annotations

import argparse
import json
import sys

from binlake.config import load_config, source_from_env
from binlake.errors import BinlakeError
from binlake.logs import register_secret, setup_logging
from binlake.spark.session import spark_session
from binlake.spark.snapshot_job import print_progress, run_snapshot


def main() -> int:
    parser = argparse.ArgumentParser(prog="jobs/snapshot.py")
    parser.add_argument("--config", required=True)
    parser.add_argument(
        "--source-from-env",
        action="store_true",
        help="take the source's host, port, user and password from BINLAKE_SOURCE_* (Airflow passes them)",
    )
    parser.add_argument("--table", action="append", default=[])
    parser.add_argument("--chunk", action="append", default=[])
    args = parser.parse_args()
    setup_logging("INFO")
    try:
        config = load_config(
            args.config, source_overrides=source_from_env() if args.source_from_env else None
        )
        for secret in config.secrets():
            register_secret(secret)
        spark = spark_session(config, "snapshot")
        try:
            report = run_snapshot(config, spark, args.table or None, args.chunk or None, print_progress)
        finally:
            spark.stop()
    except BinlakeError as e:
        print(f"snapshot: error: {e}", file=sys.stderr)
        return e.exit_code
    print(json.dumps(report.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
