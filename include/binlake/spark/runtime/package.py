"""``python -m binlake.spark.runtime.package dist/binlake.zip``: the binlake package as a zip for
``spark-submit --py-files``, so executors on a cluster import the same binlake as the driver.

Executors still need binlake's dependencies (pyarrow, pymysql, connectorx, mysql-replication,
pyiceberg, pydantic): install them in the executors' Python (the same uv.lock), or ship a packed
virtual environment with ``--archives`` and point ``spark.pyspark.python`` at it.
"""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import binlake


def build(target: Path) -> Path:
    package = Path(binlake.__file__).parent
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(package.rglob("*.py")):
            archive.write(path, Path("binlake") / path.relative_to(package))
    return target


if __name__ == "__main__":
    print(build(Path(sys.argv[1] if len(sys.argv) > 1 else "dist/binlake.zip")))
