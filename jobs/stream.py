"""spark-submit entry point of the stream: binlog into Iceberg, print a JSON summary last.

    spark-submit --master spark://host:7077 --py-files binlake.zip jobs/stream.py \
        --config pipeline.yaml [--until-caught-up] [--schema-change-applier external] [--source-from-env]
"""

from __future__ import annotations

import signal
import sys
import threading

from binlake.config import PipelineConfig
from binlake.spark.entry import job_parser, run_job
from binlake.spark.stream_job import print_batch, run_stream


def main() -> int:
    parser = job_parser("jobs/stream.py")
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
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # ends after the current batch
    until_caught_up = args.until_caught_up or args.mode == "until-caught-up"

    def applier(config: PipelineConfig) -> PipelineConfig:
        if not args.schema_change_applier:
            return config
        stream = config.stream.model_copy(update={"schema_change_applier": args.schema_change_applier})
        return config.model_copy(update={"stream": stream})

    return run_job(
        "stream",
        args,
        lambda config, spark: run_stream(config, spark, until_caught_up, print_batch, stop),
        applier,
    )


if __name__ == "__main__":
    sys.exit(main())
