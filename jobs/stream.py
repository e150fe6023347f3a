"""spark-submit entry point of the stream: binlog into Iceberg, print a JSON summary last.

    spark-submit --master spark://host:7077 --py-files binlake.zip jobs/stream.py \
        --config pipeline.yaml [--until-caught-up]
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from binlake.config import load_config
from binlake.errors import BinlakeError
from binlake.logs import register_secret, setup_logging
from binlake.spark.session import spark_session
from binlake.spark.stream_job import print_batch, run_stream


def main() -> int:
    parser = argparse.ArgumentParser(prog="jobs/stream.py")
    parser.add_argument("--config", required=True)
    parser.add_argument("--until-caught-up", action="store_true")
    args = parser.parse_args()
    setup_logging("INFO")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # ends after the current batch
    try:
        config = load_config(args.config)
        for secret in config.secrets():
            register_secret(secret)
        spark = spark_session(config, "stream")
        try:
            report = run_stream(config, spark, args.until_caught_up, print_batch, stop)
        finally:
            spark.stop()
    except BinlakeError as e:
        print(f"stream: error: {e}", file=sys.stderr)
        return e.exit_code
    print(json.dumps(report.as_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
