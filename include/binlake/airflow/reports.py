"""Data Docs in the Airflow UI: an app (mounted by the plugin under ``/binlake``) serving each
pipeline's ``<work_dir>/reports`` folder, and the URL of one run's report."""

# No ``from __future__ import annotations``: FastAPI reads the route's annotations (``Request``,
# imported where the app is built) as objects.
import functools
from pathlib import Path
from typing import Any

from binlake.airflow.pipelines import read_pipeline_files
from binlake.errors import BinlakeError

PREFIX = "/binlake"


def report_url(pipeline: str, index: Path) -> str:
    """Where the Airflow API server shows the Data Docs page ``index`` (of a run's report folder)."""
    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="http://localhost:8080").rstrip("/")
    return f"{base}{PREFIX}/reports/{pipeline}/{index.parent.name}/{index.name}"


@functools.lru_cache(maxsize=64)
def _reports_folder(pipeline: str) -> Path | None:
    # Only the pipeline section: the API server cannot complete the source from an Airflow
    # connection (a pipeline whose source comes from one has no host in its YAML).
    from binlake.config_file import load_pipeline_section

    for found in read_pipeline_files():
        if found.name == pipeline:
            try:
                section = load_pipeline_section(found.path)
            except BinlakeError:
                return None
            return (section.work_dir.resolve() / "reports").resolve()
    return None


def reports_app() -> Any:
    """A FastAPI app: ``GET /reports/<pipeline>/<path>`` → a file under that pipeline's reports,
    for users Airflow's auth manager lets read the pipeline's DAG (``binlake__<pipeline>``)."""
    from airflow.api_fastapi.core_api.security import GetUserDep, get_user
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.responses import FileResponse

    # Reports show sample values of the data: only for users signed in to Airflow (its session
    # cookie from the UI, or a bearer token) who may read the pipeline's DAG.
    app = FastAPI(title="binlake reports", dependencies=[Depends(get_user)])

    @app.get("/reports/{pipeline}/{path:path}")
    def report(pipeline: str, path: str, request: Request, user: GetUserDep) -> FileResponse:
        _may_read_dag(request, user, f"binlake__{pipeline}")  # first: a 404 would tell what exists
        folder = _reports_folder(pipeline)
        if folder is None:
            raise HTTPException(404, f"no pipeline `{pipeline}` (or its config cannot be loaded here)")
        file = (folder / path).resolve()
        if not file.is_relative_to(folder) or not file.is_file():
            raise HTTPException(404, f"no report file `{path}` for pipeline `{pipeline}`")
        return FileResponse(file)

    return app


def _may_read_dag(request: Any, user: Any, dag_id: str) -> None:
    """Airflow's own check of its DAG endpoints (the DAG's team included): 403 unless ``user`` may
    read ``dag_id``'s runs, whichever auth manager is configured."""
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
    from airflow.api_fastapi.core_api.security import requires_access_dag

    requires_access_dag("GET", DagAccessEntity.RUN, param_dag_id=dag_id)(request, user)
