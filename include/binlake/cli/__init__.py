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


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``binlake`` console script; returns the exit code."""
    args = parser().parse_args(argv)
    setup_logging(args.log_level)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except BinlakeError as e:
        print(f"binlake {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"binlake {args.command}: interrupted", file=sys.stderr)
        return 130
