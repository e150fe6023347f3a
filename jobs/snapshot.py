"""spark-submit entry point of the snapshot: read chunks into Iceberg, print a JSON summary last.

    spark-submit --master spark://host:7077 --py-files binlake.zip jobs/snapshot.py \
        --config pipeline.yaml [--table db.t] [--chunk db.t#17]
"""

from __future__ import annotations

import sys

from binlake.snapshot.progress import print_progress
from binlake.spark.entry import job_parser, run_job
from binlake.spark.snapshot_job import run_snapshot


def main() -> int:
    parser = job_parser("jobs/snapshot.py")
    parser.add_argument("--table", action="append", default=[])
    parser.add_argument("--chunk", action="append", default=[])
    args = parser.parse_args()
    return run_job(
        "snapshot",
        args,
        lambda config, spark: run_snapshot(
            config, spark, args.table or None, args.chunk or None, print_progress
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
