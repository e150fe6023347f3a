"""The Spark session of a binlake job, from the pipeline's ``spark`` section."""

from __future__ import annotations

import atexit
import logging
import os
import sys
from typing import Any

from binlake.config import PipelineConfig
from binlake.spark.runtime import forkserver
from binlake.spark.runtime.jvm_archive import DRIVER_OPTIONS, with_archive
from binlake.spark.runtime.preload import JOB_VARIABLE

DAEMON_MODULE = "binlake.spark.runtime.python_daemon"
#: ``false`` in ``pipeline.spark.conf``: no fork server (``forkserver``); the daemon imports on its own.
FORKSERVER_SETTING = "spark.binlake.forkserver"
#: What every binlake session runs with; the pipeline's ``spark.conf`` comes after (and so wins).
DEFAULTS: dict[str, Any] = {
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    # binlake prints its own progress (chunks, rows/s); Spark's stage bar would garble it.
    "spark.ui.showConsoleProgress": "false",
}


#: The driver JVM of a snapshot or a stream on a local master: its just-in-time compiler's first
#: tier only. Its JVM hands rows between Spark and the Python workers and plans batches, and
#: computes little, while the optimising tier's compiler threads compete for the cores with the
#: Python tasks doing the work: 1.4-2.5 s of CPU in a warm 1M-row snapshot on two cores (as much as
#: its Python tasks reading and writing the rows); a 5M-change catch-up 37-38 s → 33 s, and half
#: the JVM's CPU over a steady stream, whose lag stayed within a second of the full compiler's
#: (docs/benchmarks.md). A user's own option wins (``-XX:TieredStopAtLevel=4`` in
#: ``spark.driver.extraJavaOptions``).
LOCAL_JIT = "-XX:TieredStopAtLevel=1"
#: The jobs whose local driver JVM gets ``LOCAL_JIT``.
LOCAL_JIT_JOBS = ("snapshot", "stream")


def with_local_jit(conf: dict[str, str]) -> dict[str, str]:
    """``conf`` with ``LOCAL_JIT`` before the driver's Java options already there (which win)."""
    existing = conf.get(DRIVER_OPTIONS)
    return {**conf, DRIVER_OPTIONS: f"{LOCAL_JIT} {existing}" if existing else LOCAL_JIT}


def daemon_conf(master: str, job: str | None = None) -> dict[str, Any]:
    """binlake's Python daemon (``spark/runtime/python_daemon.py``: Spark's Python processes start
    sooner, with ``job``'s task modules imported; every job's when None or a job without its own
    list) on a local ``master``,
    where they run this environment. Not on a cluster: executors that get binlake through
    ``--py-files`` could not start a daemon from it (set it in ``spark.conf`` where binlake is
    installed on the executors)."""
    if not master.startswith("local"):
        return {}
    conf = {"spark.python.daemon.module": DAEMON_MODULE}
    if job is not None:
        conf[f"spark.executorEnv.{JOB_VARIABLE}"] = job
    return conf


def defaults_for(master: str, job: str | None = None) -> dict[str, Any]:
    """binlake's settings for a session it starts on ``master`` for ``job`` (None: any)."""
    return {**DEFAULTS, **daemon_conf(master, job)}


def session_conf(config: PipelineConfig, app: str, submitted: bool = False) -> dict[str, Any]:
    """The settings of ``app``'s session: binlake's defaults, then ``pipeline.spark.conf`` (which
    wins); ``submitted``: started by spark-submit, which owns the master and the driver's JVM."""
    master = config.pipeline.spark.master
    conf = dict(config.pipeline.spark.conf)
    if submitted:
        return {**DEFAULTS, **conf}
    conf = with_archive(conf)  # this process starts the driver JVM: let it map the class archive
    if app in LOCAL_JIT_JOBS and master.startswith("local"):
        conf = with_local_jit(conf)
    return {**defaults_for(master, app), **conf}


def spark_session(config: PipelineConfig, app: str) -> Any:
    """A SparkSession on ``pipeline.spark.master`` with ``pipeline.spark.conf`` applied.

    Python workers run this interpreter unless ``spark.pyspark.python`` (or PYSPARK_PYTHON) says
    otherwise: binlake and its dependencies live in this environment.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(f"binlake {app} {config.pipeline.name}")
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ
    if not submitted:
        # Run directly, not by spark-submit: the YAML names the master. Under spark-submit its
        # --master wins, as users of spark-submit expect.
        builder = builder.master(config.pipeline.spark.master)
    conf = session_conf(config, app, submitted)
    if not submitted:
        conf = with_forkserver(conf, app)
    for key, value in conf.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except BaseException:
        close_forkserver()
        raise
    session.sparkContext.setLogLevel("ERROR")
    _quiet_query_errors(session)
    return session


_forkserver: forkserver.ForkServer | None = None


def with_forkserver(conf: dict[str, Any], job: str | None) -> dict[str, Any]:
    """``conf`` with a fork server importing ``job``'s task modules while the JVM starts
    (``forkserver``: its address in the daemon's environment), where this process is about to start
    a session with binlake's daemon; ``conf`` itself otherwise (a session already running keeps its
    settings). This process's previous server ends (the daemons it forked live on with their
    session)."""
    global _forkserver
    from pyspark import SparkContext

    if not wants_forkserver(conf) or SparkContext._active_spark_context:
        return conf
    close_forkserver()
    _forkserver = forkserver.start(job, conf)
    if _forkserver is None:
        return conf
    return {**conf, f"spark.executorEnv.{forkserver.ADDRESS_VARIABLE}": _forkserver.address}


def wants_forkserver(conf: dict[str, Any]) -> bool:
    """Whether a session of ``conf`` gets a fork server: it runs binlake's daemon (a local master),
    and its pipeline did not turn the server off (``FORKSERVER_SETTING``)."""
    daemon = conf.get("spark.python.daemon.module") == DAEMON_MODULE
    return daemon and str(conf.get(FORKSERVER_SETTING, "true")).lower() != "false"


def close_forkserver() -> None:
    """End this process's fork server, if it has one (the daemons it forked live on)."""
    global _forkserver
    if _forkserver is not None:
        _forkserver.close()
        _forkserver = None


atexit.register(close_forkserver)


def _quiet_query_errors(session: Any) -> None:
    """A failed streaming query's error reaches binlake, which says it in its own words last;
    Spark's copy (its stack, the query's dump and logical plan) is logged only when debugging."""
    if logging.getLogger().level <= logging.DEBUG:
        return
    jvm = session.sparkContext._jvm
    log4j = jvm.org.apache.logging.log4j
    log4j.core.config.Configurator.setLevel("org.apache.spark.sql.execution.streaming", log4j.Level.OFF)
