"""The Spark session of a binlake job, from the pipeline's ``spark`` section."""

from __future__ import annotations

import os
import sys
from typing import Any

from binlake.config import PipelineConfig
from binlake.spark.jvm_archive import with_archive

#: What every binlake session runs with; the pipeline's ``spark.conf`` comes after (and so wins).
DEFAULTS: dict[str, Any] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # binlake prints its own progress (chunks, rows/s); Spark's stage bar would garble it.
    "spark.ui.showConsoleProgress": "false",
    # Spark's Python processes start sooner from binlake's daemon (``spark/python_daemon.py``);
    # ``pyspark.daemon`` here goes back to Spark's own.
    "spark.python.daemon.module": "binlake.spark.python_daemon",
}


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
    builder = builder.appName(f"binlake {app} {config.pipeline.name}").config(map=DEFAULTS)
    conf = config.pipeline.spark.conf
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        conf = with_archive(conf)  # this process starts the driver JVM: let it map the class archive
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
