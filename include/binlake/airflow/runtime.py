"""What an Airflow task needs when it runs: the pipeline config, with the source from a connection.

With ``airflow.source_conn_id`` the source's host, port, login and password come from that Airflow
connection (fetched through Airflow, so its secrets masker hides the password in task logs). Spark
jobs get them through environment variables of the spark-submit process (``source_env``), never
on a command line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from binlake.airflow.pipelines import read_pipeline_file
from binlake.config import PipelineConfig
from binlake.config.pipeline_file import SOURCE_ENV, load_config
from binlake.errors import ConfigError
from binlake.logs import register_secret


def load_pipeline(path: str | Path) -> PipelineConfig:
    """The pipeline's config, its source completed from its Airflow connection if it names one."""
    config = load_config(path, source_overrides=source_from_connection(path))
    for secret in config.secrets():
        register_secret(secret)
    return config


def source_from_connection(path: str | Path) -> dict[str, Any] | None:
    """The source settings of the file's ``airflow.source_conn_id`` connection (None: it has none)."""
    conn_id = read_pipeline_file(Path(path)).airflow.source_conn_id
    if not conn_id:
        return None
    from airflow.sdk import BaseHook

    try:
        conn = BaseHook.get_connection(conn_id)
    except Exception as e:  # Airflow raises its own not-found error type per version
        raise ConfigError(
            f"`airflow.source_conn_id` names the Airflow connection `{conn_id}`, which could not be "
            f"read ({type(e).__name__}). Fix: create it (Admin → Connections, type MySQL) or set "
            f"AIRFLOW_CONN_{conn_id.upper()}",
            str(path),
        ) from None
    found: dict[str, Any] = {"hostname": conn.host, "username": conn.login}
    if conn.port:
        found["port"] = conn.port
    if conn.password:
        found["password"] = conn.password
    return {k: v for k, v in found.items() if v is not None}


def source_env(overrides: dict[str, Any] | None) -> dict[str, str]:
    """Environment variables that hand a connection's source settings to a Spark job."""
    return {SOURCE_ENV[k]: str(v) for k, v in (overrides or {}).items() if k in SOURCE_ENV}
