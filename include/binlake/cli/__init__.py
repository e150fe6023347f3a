"""The ``binlake`` command: ``binlake --config FILE <command>``.

Thin on purpose: parse arguments, load the config, call the package, print, choose the exit code.
Errors binlake raises on purpose (``BinlakeError``) are printed as their message alone, never as a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from binlake.cli.arguments import parser
from binlake.errors import BinlakeError
from binlake.logs import setup_logging

#: The commands that plan, read or commit sink tables in this process.
WRITERS_AND_READERS = frozenset({"plan", "snapshot", "stream", "backfill", "verify", "maintain", "quality"})


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``binlake`` console script; returns the exit code."""
    args = parser().parse_args(argv)
    setup_logging(args.log_level)
    if args.command in WRITERS_AND_READERS:
        from binlake.sink.pyiceberg_internals import cache_immutable_files

        cache_immutable_files()  # the one patch of pyiceberg, for the commands that use the sink
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except BinlakeError as e:
        print(f"binlake {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"binlake {args.command}: interrupted", file=sys.stderr)
        return 130
