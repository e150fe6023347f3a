"""Crash points for the kill -9 tests: ``BINLAKE_CRASH_AT=<point>`` kills the process group there.

The tests need the crash at an exact place (between the Iceberg commit and the state store record,
say); killing from outside at a random moment would only sometimes hit it. Without the variable a
crash point does nothing.
"""

from __future__ import annotations

import os
import signal

VARIABLE = "BINLAKE_CRASH_AT"


def crash_point(name: str) -> None:
    """Kill this process and its group (the Spark JVM and workers too) with SIGKILL if asked to."""
    if os.environ.get(VARIABLE) == name:
        os.killpg(os.getpgid(0), signal.SIGKILL)
