"""binlake's Python daemon for Spark (``spark.python.daemon.module``): the task workers start with
pyspark already compiled and their job's modules imported.

Spark forks its task workers from a daemon (``python -m <daemon> pyspark.worker``); the setting
names it for those only (the planning processes of a query use Spark's own daemon or none). The
stock daemon leaves two costs in the first batch of every query (measured on 2 cores):

- Spark puts its ``pyspark.zip`` (no compiled files) first on the path: the daemon imports the
  installed pyspark instead (``python_path``, which the ``.pth`` file installed with binlake
  applies to every Python process Spark starts; the daemon does it too where that file is absent).
- Each task worker imports pyarrow, pandas, python-mysql-replication and binlake's decoders after
  Spark forks it: ~2 s of CPU per worker, at the stream's first batch. The task workers' daemon
  imports them once, before it forks — only the session's job's (``JOB_VARIABLE``), for the first
  task waits for them — or, where the driver started a fork server (``forkserver``), had them
  imported while the JVM started, and the server's child is the daemon.

Everything else is Spark's own daemon (``pyspark.daemon``), unchanged.
"""

from __future__ import annotations

import gc
import os
import sys

from binlake.spark.runtime import forkserver
from binlake.spark.runtime.python_path import use_installed_pyspark

#: The module Spark names for task workers (the default when it names none).
TASK_WORKER = "pyspark.worker"
#: The environment variable naming the job whose task modules the daemon imports (a session's
#: ``spark.executorEnv``, ``spark/runtime/session.py``); unset: every job's.
JOB_VARIABLE = "BINLAKE_TASK_JOB"
#: What each job's tasks import beside the worker itself. The stream's: binlake's segment reader and
#: decoders, and pandas (pyarrow imports it whenever it converts a numpy array). The snapshot's: its
#: chunk reader and Parquet writer, not the stream's modules (a fresh session's first Python job:
#: 2.5 s instead of 3.8 s; a cold snapshot end to end did not measurably change, bench/RESULTS.md).
PRELOADS = {
    "stream": ("pandas", "binlake.spark.stream_task", "binlake.source.binlog.column_decoder"),
    "snapshot": ("binlake.spark.snapshot_task",),
}
PRELOAD = (TASK_WORKER, *(m for modules in PRELOADS.values() for m in modules))


def modules_for(job: str | None) -> tuple[str, ...]:
    """The modules the daemon imports for ``job``'s task workers (every job's when None or unknown)."""
    return (TASK_WORKER, *PRELOADS[job]) if job in PRELOADS else PRELOAD


def preload(modules: tuple[str, ...] = PRELOAD) -> None:
    """Import ``modules`` in the daemon, so every worker it forks has them.

    A module that cannot be imported is left to the worker, which then fails with its own error
    (a daemon that dies here would hide it).
    """
    import importlib

    # Imports make objects and free almost none: the collector's passes over them are wasted
    # (a twentieth of the imports' time, which the first task waits for).
    gc.disable()
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError:
                continue
        _load_tls_defaults()
    finally:
        # Forked workers share these objects' memory until written; the collector would write to
        # every one of them (its bookkeeping), copying the pages in each worker.
        gc.freeze()
        gc.enable()


def _load_tls_defaults() -> None:
    """The source connections' TLS context (the system's CA store: 25 ms of each worker's first
    connection), where the job's modules connect to the source."""
    connection = sys.modules.get("binlake.source.server.connection")
    if connection is not None:
        connection.SourceConnection.preferred_context()


def main() -> None:
    use_installed_pyspark()
    worker = sys.argv[1] if len(sys.argv) > 1 else TASK_WORKER
    if worker == TASK_WORKER:
        address = os.environ.get(forkserver.ADDRESS_VARIABLE)
        if address and forkserver.hand_over(address):
            return  # the server's child was the daemon, this process its stand-in
        preload(modules_for(os.environ.get(JOB_VARIABLE)))
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
