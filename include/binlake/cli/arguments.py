"""The command line's arguments: one sub-command per step, each naming its handler."""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re

from binlake import __version__
from binlake.cli.commands import (
    backfill_command,
    maintain_command,
    plan_command,
    quality_command,
    snapshot_command,
    status_command,
    stream_command,
    validate_command,
    verify_command,
)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="binlake",
        description="Change data capture from MySQL/MariaDB into Apache Iceberg.",
    )
    parser.add_argument("--version", action="version", version=f"binlake {__version__}")
    parser.add_argument(
        "-c",
        "--config",
        default=os.environ.get("BINLAKE_CONFIG"),
        help="pipeline YAML file (default: $BINLAKE_CONFIG)",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("BINLAKE_LOG_LEVEL", "WARNING"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
        help="log level on stderr (default: WARNING, or $BINLAKE_LOG_LEVEL)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate = commands.add_parser(
        "validate", help="check the config and the source server; exit 0 when nothing is an error"
    )
    validate.set_defaults(handler=validate_command)
    validate.add_argument("--json", action="store_true", help="print the checks as JSON")
    plan = commands.add_parser(
        "plan", help="validate, discover the tables and split them into chunks (kept in the state store)"
    )
    plan.set_defaults(handler=plan_command)
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--replan", action="store_true", help="split again, forgetting earlier progress")
    snapshot = commands.add_parser(
        "snapshot", help="plan if needed, then read every unfinished chunk into Iceberg on Spark"
    )
    snapshot.add_argument("--table", action="append", default=[], help="only this source table (db.table)")
    snapshot.add_argument("--chunk", action="append", default=[], help="only this chunk (db.table#id)")
    snapshot.set_defaults(handler=snapshot_command)
    snapshot.add_argument("--json", action="store_true", help="print the summary as JSON")
    stream = commands.add_parser(
        "stream", help="stream the binlog into Iceberg (after the snapshot, or by `source.startup_mode`)"
    )
    stream.add_argument(
        "--until-caught-up",
        action="store_true",
        help="stop once the position the source has now is applied (scheduled incremental runs)",
    )
    stream.set_defaults(handler=stream_command)
    stream.add_argument("--json", action="store_true", help="print the summary as JSON")
    backfill = commands.add_parser(
        "backfill",
        help="re-snapshot tables (or a key range) while the stream runs; the stream applies what it reads",
    )
    _tables_and_key_range(backfill)
    backfill.add_argument("--chunk-size", type=int, help="rows per chunk (default: source.chunk_size)")
    backfill.add_argument("--id", help="backfill id; an existing id resumes (default: a new one)")
    backfill.add_argument(
        "--wait", action="store_true", help="wait until the stream has applied it (the stream must run)"
    )
    backfill.add_argument(
        "--timeout", type=float, help="seconds --wait waits (default: backfill.wait_timeout_s)"
    )
    backfill.set_defaults(handler=backfill_command)
    backfill.add_argument("--json", action="store_true", help="print the summary as JSON")
    verify = commands.add_parser(
        "verify",
        help="compare each chunk's checksum on the source with the sink's at the same binlog position",
    )
    _tables_and_key_range(verify)
    verify.add_argument("--id", help="verification id (default: a new one)")
    verify.add_argument(
        "--repair",
        action="store_true",
        help="backfill drifted chunks, wait for the stream, verify them again",
    )
    verify.add_argument("--timeout", type=float, help="seconds --repair waits for the stream to apply it")
    verify.add_argument("--json", action="store_true", help="print only the JSON summary")
    verify.set_defaults(handler=verify_command)
    status = commands.add_parser("status", help="the plan, chunk progress and the stream's offset and lag")
    status.set_defaults(handler=status_command)
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    status.add_argument(
        "--max-lag", type=float, metavar="SECONDS",
        help="exit 1 (naming why) when the stream is not running, is more than SECONDS behind, or holds "
        "tables back: for scripts and monitors",
    )  # fmt: skip
    quality = commands.add_parser(
        "quality", help="validate the sink tables with great-expectations; Data Docs under work_dir/reports"
    )
    quality.add_argument("--table", action="append", default=[], help="only this table (sink or source name)")
    quality.add_argument("--run-name", help="name of this run in the report and the state store")
    quality.set_defaults(handler=quality_command)
    quality.add_argument("--json", action="store_true", help="print the summary as JSON")
    maintain = commands.add_parser(
        "maintain", help="compact small files, expire old snapshots, remove orphan files (no writer may run)"
    )
    maintain.add_argument(
        "--table", action="append", default=[], help="only this sink table (ns.table); repeat"
    )
    maintain.add_argument(
        "--expire-older-than", type=_duration, default="7d", help="snapshot age (default 7d)"
    )
    maintain.add_argument(
        "--orphans-older-than", type=_duration, default="3d", help="orphan age (default 3d)"
    )
    maintain.add_argument(
        "--rewrite-partitions",
        action="store_true",
        help="also rewrite files of earlier partition specs into the current one (after a layout change)",
    )
    maintain.set_defaults(handler=maintain_command)
    maintain.add_argument("--json", action="store_true", help="print the reports as JSON")
    return parser


def _duration(text: str) -> dt.timedelta:
    """``7d``, ``12h``, ``30m``, ``45s`` or ``0``."""
    match = re.fullmatch(r"\s*(\d+)\s*([dhms]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"`{text}` is not a duration: write e.g. 7d, 12h, 30m, 45s or 0")
    unit = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds", "": "seconds"}[match.group(2)]
    return dt.timedelta(**{unit: int(match.group(1))})


def _tables_and_key_range(command: argparse.ArgumentParser) -> None:
    """``--table`` (repeated) and ``--from``/``--to``: what a backfill or a verification covers."""
    command.add_argument("--table", action="append", default=[], help="only this source table; repeat")
    command.add_argument("--from", dest="key_from", type=int, help="first chunk-key value (integral keys)")
    command.add_argument("--to", dest="key_to", type=int, help="chunk-key value to stop before")
