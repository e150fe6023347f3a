"""``make airflow``'s process: ``airflow standalone``, and every process it starts stopped with it.

Stopped with SIGTERM, ``airflow standalone`` exits and leaves its scheduler, triggerer and task
workers running; task processes and the Spark jobs they submit run in process groups of their
own, so killing the standalone's group does not reach them either. This supervisor makes itself
the *child subreaper* of everything below it (Linux: orphans are re-parented to it, not to init),
so it can always find them. On Ctrl-C or SIGTERM it asks ``airflow standalone`` to stop, gives it
``--grace`` seconds, then sends SIGTERM to every process still below it and, after as long again,
SIGKILL. When the standalone exits by itself, whatever it left behind is stopped the same way.

    python -m binlake.airflow.standalone [--grace 20] [-- command ...]   (default: airflow standalone)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

import psutil

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Orphaned descendants are re-parented to this process (Linux 3.4+); whether it worked."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def descendants() -> list[psutil.Process]:
    try:
        return psutil.Process().children(recursive=True)
    except psutil.Error:
        return []


def stop_all(grace: float) -> int:
    """SIGTERM to every process below this one, SIGKILL to those alive after ``grace`` seconds;
    how many were left to kill."""
    remaining = descendants()
    for process in remaining:
        _signal(process, signal.SIGTERM)
    _, alive = psutil.wait_procs(remaining, timeout=grace)
    alive += [p for p in descendants() if p not in alive]  # started while stopping
    for process in alive:
        _signal(process, signal.SIGKILL)
    psutil.wait_procs(alive, timeout=5)
    return len(alive)


def _signal(process: psutil.Process, number: int) -> None:
    with contextlib.suppress(psutil.Error):  # gone already
        process.send_signal(number)


def supervise(command: Sequence[str], grace: float) -> int:
    """Run ``command`` until it exits or this process is told to stop; its exit code."""
    if not become_subreaper():
        print("binlake: cannot become a child subreaper here: orphans may outlive Airflow", file=sys.stderr)
    stop = threading.Event()

    def on_signal(number: int, _frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    main = subprocess.Popen(list(command))
    while main.poll() is None and not stop.wait(0.5):
        pass
    if stop.is_set() and main.poll() is None:
        print(f"binlake: stopping {command[0]} and the processes it started ...", file=sys.stderr, flush=True)
        main.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            main.wait(timeout=grace)
    killed = stop_all(grace)
    code = main.poll()
    if code is None:  # killed by stop_all
        code = main.wait()
    left = descendants()
    print(
        f"binlake: {command[0]} stopped (exit {code}); {killed} processes needed SIGKILL; {len(left)} left",
        file=sys.stderr,
    )
    return 0 if stop.is_set() and not left else code


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m binlake.airflow.standalone", description=__doc__)
    parser.add_argument("--grace", type=float, default=20.0, help="seconds to wait before escalating")
    parser.add_argument("command", nargs="*", default=["airflow", "standalone"])
    args = parser.parse_args(argv)
    return supervise(args.command, args.grace)


if __name__ == "__main__":
    sys.exit(main())
