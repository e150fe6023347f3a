"""Spark's Python processes import the installed, compiled pyspark, not Spark's ``pyspark.zip``.

Spark puts ``$SPARK_HOME/python/lib/pyspark.zip`` first on the path of every Python process it
starts. The zip holds no compiled files, so each process compiles the pyspark modules it imports
from source: ~0.4 s of CPU per process on 2 cores. A stream query starts five such processes one
after another before its first batch (the data source lookup, its schema, the streaming source's
runner, read planning, the task workers' daemon), and binlake's daemon (``python_daemon``) serves
only the last: the others are started by Spark with its own daemon or none, whatever
``spark.python.daemon.module`` says.

When Spark runs from the pip-installed pyspark (binlake's set-up), that zip is the installed
package's own copy, so nothing changes when a process imports the installed package instead. The
``.pth`` file installed beside binlake (``binlake_installed_pyspark.pth``, from
``installed_pyspark.pth``) runs :func:`use_installed_pyspark` at the start of each Python process
of the environment whose path holds a ``pyspark.zip``: Spark's, and no other.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import PathFinder

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


def use_installed_pyspark() -> None:
    """Drop the installed pyspark's own zip from this process's path (before it imports pyspark)."""
    sys.path[:] = without_own_zip(sys.path)
