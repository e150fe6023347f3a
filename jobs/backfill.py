"""spark-submit entry point of a backfill: stage chunks of chosen tables, print a JSON summary last.

    spark-submit --master spark://host:7077 --py-files binlake.zip jobs/backfill.py \
        --config pipeline.yaml --id backfill-1 [--table db.t] [--from 1000 --to 2000] [--chunk-size N]

The running stream applies the staged chunks (it is the only writer of the sink tables).
"""

from __future__ import annotations

import sys

from binlake.backfill.plan import KeyRange
from binlake.backfill.progress import print_progress
from binlake.spark.backfill_job import run_backfill
from binlake.spark.entry import job_parser, run_job


def main() -> int:
    parser = job_parser("jobs/backfill.py")
    parser.add_argument("--id", required=True, help="backfill id (an existing one resumes)")
    parser.add_argument("--table", action="append", default=[])
    parser.add_argument("--from", dest="key_from", type=int)
    parser.add_argument("--to", dest="key_to", type=int)
    parser.add_argument("--chunk-size", type=int)
    args = parser.parse_args()
    key_range = KeyRange(args.key_from, args.key_to)
    return run_job(
        "backfill",
        args,
        lambda config, spark: run_backfill(
            config, spark, args.id, args.table or None, key_range, args.chunk_size, print_progress
        ),
    )


if __name__ == "__main__":
    sys.exit(main())
