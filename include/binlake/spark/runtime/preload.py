"""What Spark's Python daemon imports before it forks the task workers: the modules of the job's
tasks (``JOB_VARIABLE``), and the source connections' TLS defaults. Binlake's daemon
(``python_daemon``) does it at its start, or the fork server (``forkserver``) while the JVM starts."""

from __future__ import annotations

import gc
import sys

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
