"""Which pipeline a page of binlake's app is for, and who may read it: the users Airflow's auth
manager lets read the pipeline's DAG (``binlake__<pipeline>``)."""

from __future__ import annotations

import functools
from typing import Any

from binlake.airflow.pipelines import read_pipeline_files
from binlake.config import PipelineSection
from binlake.errors import BinlakeError

PREFIX = "/binlake"


@functools.lru_cache(maxsize=64)
def pipeline_section(pipeline: str) -> PipelineSection | None:
    """The ``pipeline`` section of the file naming ``pipeline`` (None: no such file, or it cannot be
    loaded here). Only that section: the API server cannot complete the source from an Airflow
    connection (a pipeline whose source comes from one has no host in its YAML)."""
    from binlake.config.pipeline_file import load_pipeline_section

    for found in read_pipeline_files():
        if found.name == pipeline:
            try:
                return load_pipeline_section(found.path)
            except BinlakeError:
                return None
    return None


def pipeline_names() -> list[str]:
    return [found.name for found in read_pipeline_files()]


def may_read_dag(request: Any, user: Any, dag_id: str) -> None:
    """Airflow's own check of its DAG endpoints (the DAG's team included): 403 unless ``user`` may
    read ``dag_id``'s runs, whichever auth manager is configured."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    requires_access_dag("GET", DagAccessEntity.RUN, param_dag_id=dag_id)(request, user)
