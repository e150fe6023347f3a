"""The Spark session of a binlake job, from the pipeline's ``spark`` section."""

from __future__ import annotations

import os
import sys
from typing import Any

from binlake.config import PipelineConfig
from binlake.spark.jvm_archive import with_archive


def spark_session(config: PipelineConfig, app: str) -> Any:
    """A SparkSession on ``pipeline.spark.master`` with ``pipeline.spark.conf`` applied.

    Python workers run this interpreter unless ``spark.pyspark.python`` (or PYSPARK_PYTHON) says
    otherwise: binlake and its dependencies live in this environment.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        # Run directly, not by spark-submit: the YAML names the master. Under spark-submit its
        # --master wins, as users of spark-submit expect.
        builder = builder.master(config.pipeline.spark.master)
    builder = (
        builder.appName(f"binlake {app} {config.pipeline.name}")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # binlake prints its own progress (chunks, rows/s); Spark's stage bar would garble it.
        .config("spark.ui.showConsoleProgress", "false")
    )
    conf = config.pipeline.spark.conf
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        conf = with_archive(conf)  # this process starts the driver JVM: let it map the class archive
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
