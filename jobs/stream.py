"""spark-submit entry point of the stream: binlog into Iceberg, print a JSON summary last.

    spark-submit --master spark://host:7077 --py-files binlake.zip jobs/stream.py \
        --config pipeline.yaml [--until-caught-up] [--schema-change-applier external] [--source-from-env]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from binlake.config import load_config, source_from_env
from binlake.errors import BinlakeError
from binlake.logs import register_secret, setup_logging
from binlake.spark.session import spark_session
from binlake.spark.stream_job import print_batch, run_stream


def main() -> int:
    parser = argparse.ArgumentParser(prog="jobs/stream.py")
    parser.add_argument("--config", required=True)
    parser.add_argument(
        "--source-from-env",
        action="store_true",
        help="take the source's host, port, user and password from BINLAKE_SOURCE_* (Airflow passes them)",
    )
    parser.add_argument("--until-caught-up", action="store_true")
    parser.add_argument(
        "--mode",
        choices=["continuous", "until-caught-up"],
        help="the same as --until-caught-up when `until-caught-up` (for templated arguments)",
    )
    parser.add_argument(
        "--schema-change-applier",
        choices=["inline", "external"],
        help="override `stream.schema_change_applier` (Airflow: external, its DDL DAG applies)",
    )
    args = parser.parse_args()
    setup_logging("INFO")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # ends after the current batch
    try:
        config = load_config(
            args.config, source_overrides=source_from_env() if args.source_from_env else None
        )
        for secret in config.secrets():
            register_secret(secret)
        if args.schema_change_applier:
            stream = config.stream.model_copy(update={"schema_change_applier": args.schema_change_applier})
            config = config.model_copy(update={"stream": stream})
        until_caught_up = args.until_caught_up or args.mode == "until-caught-up"
        spark = spark_session(config, "stream")
        try:
            report = run_stream(config, spark, until_caught_up, print_batch, stop)
        finally:
            spark.stop()
    except BinlakeError as e:
        print(f"stream: error: {e}", file=sys.stderr)
        return e.exit_code
    print(json.dumps(report.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
