"""binlake's Python daemon for Spark (``spark.python.daemon.module``): Spark's Python processes
start with pyspark already compiled, and the stream's task workers with their modules imported.

Spark forks its Python processes — the data source lookup, its schema, read planning, the tasks'
workers — from a daemon, one per kind (``python -m <daemon> <worker module>``). The stock daemon
leaves two costs in every query's start (measured on 2 cores, in the order a query meets them):

- Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on its Python processes' path. The zip
  holds no compiled files, so each process compiles the pyspark modules it imports again: 0.3 s
  more per daemon, 0.4-0.6 s more per worker module (``pyspark.worker``, read planning). When
  Spark runs from the pip-installed pyspark (binlake's set-up), that zip is the installed
  package's own copy, so the daemon imports the installed package (compiled once, at install).
- Each task worker imports pyarrow, pandas, python-mysql-replication and binlake's decoders after
  Spark forks it: ~2 s of CPU per worker, at the stream's first batch. The task workers' daemon
  imports them once, before it forks.

Everything else is Spark's own daemon (``pyspark.daemon``), unchanged.
"""

from __future__ import annotations

import gc
import os
import sys
from importlib.machinery import PathFinder

#: The module Spark names for task workers (the default when it names none).
TASK_WORKER = "pyspark.worker"
#: What a stream task imports: the worker itself, binlake's segment reader and decoders, and pandas
#: (pyarrow imports it whenever it converts a numpy array).
PRELOAD = (TASK_WORKER, "pandas", "binlake.spark.stream_task", "binlake.source.column_decoder")

_ZIP = os.path.join("python", "lib", "pyspark.zip")


def without_own_zip(path: list[str]) -> list[str]:
    """``path`` without Spark's ``pyspark.zip`` when it is the installed pyspark's own copy.

    A zip of another Spark (a cluster's ``SPARK_HOME``) stays: the JVM and its Python side must be
    the same version, and that zip is how Spark ensures it.
    """
    others = [p for p in path if not p.endswith(_ZIP)]
    spec = PathFinder.find_spec("pyspark", others)
    if spec is None or spec.origin is None:
        return path
    own = os.path.realpath(os.path.join(os.path.dirname(spec.origin), _ZIP))
    return [p for p in path if not (p.endswith(_ZIP) and os.path.realpath(p) == own)]


def preload(modules: tuple[str, ...] = PRELOAD) -> None:
    """Import ``modules`` in the daemon, so every worker it forks has them.

    A module that cannot be imported is left to the worker, which then fails with its own error
    (a daemon that dies here would hide it).
    """
    import importlib

    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            continue
    # Forked workers share these objects' memory until written; the collector would write to
    # every one of them (its bookkeeping), copying the pages in each worker.
    gc.freeze()


def main() -> None:
    sys.path[:] = without_own_zip(sys.path)
    worker = sys.argv[1] if len(sys.argv) > 1 else TASK_WORKER
    if worker == TASK_WORKER:
        preload()
    from pyspark import daemon

    daemon.manager()


if __name__ == "__main__":
    main()
