"""The ``binlake`` command: ``binlake --config FILE <command>``.

Thin on purpose: parse arguments, load the config, call the package, print, choose the exit code.
Errors binlake raises on purpose (``BinlakeError``) are printed as their message alone, never as a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence

from binlake import __version__
from binlake.config import PipelineConfig, load_config
from binlake.errors import BinlakeError, ConfigError
from binlake.logs import register_secret, setup_logging
from binlake.source.validator import Check, has_errors, validate

log = logging.getLogger("binlake")

EXIT_OK = 0
EXIT_CHECKS_FAILED = 1


def _parser() -> argparse.ArgumentParser:
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
    validate.add_argument("--json", action="store_true", help="print the checks as JSON")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``binlake`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    setup_logging(args.log_level)
    try:
        if args.command == "validate":
            return _validate(args.config, as_json=args.json)
    except BinlakeError as e:
        print(f"binlake {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"binlake {args.command}: interrupted", file=sys.stderr)
        return 130
    raise AssertionError(f"unhandled command {args.command}")  # argparse restricts the choices


def _load(path: str | None) -> PipelineConfig:
    if not path:
        raise ConfigError("no pipeline config given: pass `--config FILE` or set BINLAKE_CONFIG")
    config = load_config(path)
    for secret in config.secrets():
        register_secret(secret)
    return config


def _validate(path: str | None, as_json: bool) -> int:
    try:
        config = _load(path)
    except ConfigError as e:
        checks = [Check("config", "error", str(e))]
    else:
        checks = [
            Check("config", "ok", f"pipeline `{config.pipeline.name}` read from {path}"),
            *validate(config),
        ]
    failed = has_errors(checks)
    if as_json:
        print(json.dumps({"ok": not failed, "checks": [c.as_dict() for c in checks]}, indent=2))
    else:
        _print_checks(checks)
    return EXIT_CHECKS_FAILED if failed else EXIT_OK


def _print_checks(checks: list[Check]) -> None:
    width = max(len(c.name) for c in checks)
    for check in checks:
        print(f"{check.status:<8} {check.name:<{width}}  {check.message}")
        if check.fix:
            print(f"{'':<8} {'':<{width}}  fix: {check.fix}")
    errors = sum(c.status == "error" for c in checks)
    warnings = sum(c.status == "warning" for c in checks)
    if errors:
        print(f"FAILED: {errors} error(s), {warnings} warning(s); fix the errors above and run again")
    else:
        print(f"OK: all checks passed ({warnings} warning(s))")


if __name__ == "__main__":
    sys.exit(main())
