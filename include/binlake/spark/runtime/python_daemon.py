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
  imports them once, before it forks — only the session's job's (``preload.JOB_VARIABLE``), for the first
  task waits for them — or, where the driver started a fork server (``forkserver``), had them
  imported while the JVM started, and the server's child is the daemon.

Everything else is Spark's own daemon (``pyspark.daemon``), unchanged.
"""

from __future__ import annotations

import os
import sys

from binlake.spark.runtime import forkserver
from binlake.spark.runtime.preload import JOB_VARIABLE, TASK_WORKER, modules_for, preload
from binlake.spark.runtime.python_path import use_installed_pyspark


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
