"""The install from uv.lock is what binlake needs: the known traps are avoided."""

from __future__ import annotations

import shutil
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest


def test_pinned_versions() -> None:
    assert metadata.version("pyspark") == "4.3.0"
    assert metadata.version("apache-airflow") == "3.3.2"
    assert metadata.version("great-expectations") == "1.24.1"
    assert int(metadata.version("pandas").split(".")[0]) < 3
    metadata.version("apache-airflow-providers-apache-spark")
    metadata.version("mysql-replication")
    metadata.version("pyiceberg")


def test_pyspark_client_is_not_installed() -> None:
    # pyspark-client overwrites pyspark's files with the Connect-only client.
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.version("pyspark-client")
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    assert any(jars.glob("spark-core_*.jar")), "pyspark's jars are missing: the full pyspark was overwritten"


def test_binlake_console_script_is_installed() -> None:
    assert shutil.which("binlake", path=str(Path(sys.executable).parent))


def test_spark_local_runs_python_workers_from_the_venv(spark: Any) -> None:
    import pyarrow as pa
    from pyspark.sql.functions import udf

    worker_python = udf(lambda _: sys.executable, "string")
    rows = spark.range(4).select(worker_python("id").alias("py")).distinct().collect()
    assert [r.py for r in rows] == [sys.executable]
    # Arrow in and out, the way binlake hands data between Spark and pyiceberg.
    table = spark.createDataFrame(pa.table({"k": [1, 2, 3]})).toArrow()
    assert table.column("k").to_pylist() == [1, 2, 3]
