"""What every spark-submit entry point in ``jobs/`` does around its job: arguments, config,
secrets, the Spark session, binlake's errors as messages, and a JSON summary on the last line."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from binlake.config import PipelineConfig
from binlake.config.pipeline_file import load_config, source_from_env
from binlake.errors import BinlakeError, ConfigError
from binlake.logs import register_secret, setup_logging
from binlake.sink.pyiceberg_internals import cache_immutable_files
from binlake.spark.runtime.session import spark_session


def job_parser(prog: str) -> argparse.ArgumentParser:
    """A parser with the options every job takes (``--config``, ``--source-from-env``)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--config", required=True)
    parser.add_argument(
        "--source-from-env",
        action="store_true",
        help="take the source's host, port, user and password from BINLAKE_SOURCE_* (Airflow passes them)",
    )
    parser.add_argument(
        "--source-file",
        help="a JSON file (readable by this job only) with source settings, the password above all: "
        "how Airflow hands it over without a command line or environment showing it",
    )
    return parser


def run_job(
    name: str,
    args: argparse.Namespace,
    work: Callable[[PipelineConfig, Any], Any],
    adjust: Callable[[PipelineConfig], PipelineConfig] | None = None,
) -> int:
    """Load the config (``adjust`` it), run ``work(config, spark)`` and print its report's JSON;
    returns the exit code. A ``BinlakeError`` is printed as its message alone."""
    setup_logging("INFO")
    cache_immutable_files()  # the one patch of pyiceberg, once per job (sink/pyiceberg_internals.py)
    try:
        config = load_config(args.config, source_overrides=_source_overrides(args))
        for secret in config.secrets():
            register_secret(secret)
        if adjust is not None:
            config = adjust(config)
        spark = spark_session(config, name)
        try:
            report = work(config, spark)
        finally:
            spark.stop()
    except BinlakeError as e:
        print(f"{name}: error: {e}", file=sys.stderr)
        return e.exit_code
    print(json.dumps(report.as_dict()))
    return 0


def _source_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    """The source settings a job gets from Airflow: the environment, then ``--source-file``."""
    found = (source_from_env() if args.source_from_env else None) or {}
    if args.source_file:
        try:
            found.update(json.loads(Path(args.source_file).read_text()))
        except (OSError, ValueError) as e:
            raise ConfigError(f"Could not read the source settings file `{args.source_file}`: {e}") from None
    return found or None
