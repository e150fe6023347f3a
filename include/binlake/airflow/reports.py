"""Data Docs in the Airflow UI: each pipeline's ``<work_dir>/reports`` folder, served under
``/binlake/reports/<pipeline>/…`` by binlake's app (``web_app``), and the URL of one run's report."""

# No ``from __future__ import annotations``: FastAPI reads the route's annotations as objects.
from pathlib import Path
from typing import TYPE_CHECKING

from binlake.airflow.page_access import PREFIX, may_read_dag, pipeline_section

if TYPE_CHECKING:
    from fastapi import FastAPI


def report_url(pipeline: str, index: Path) -> str:
    """Where the Airflow API server shows the Data Docs page ``index`` (of a run's report folder)."""
    from airflow.configuration import conf

    base = conf.get("api", "base_url", fallback="http://localhost:8080").rstrip("/")
    return f"{base}{PREFIX}/reports/{pipeline}/{index.parent.name}/{index.name}"


def add_report_routes(app: "FastAPI") -> None:
    """``GET /reports/<pipeline>/<path>`` → a file under that pipeline's reports folder."""
    from airflow.api_fastapi.core_api.security import GetUserDep
    from fastapi import HTTPException, Request
    from fastapi.responses import FileResponse

    @app.get("/reports/{pipeline}/{path:path}")
    def report(pipeline: str, path: str, request: Request, user: GetUserDep) -> FileResponse:
        may_read_dag(request, user, f"binlake__{pipeline}")  # first: a 404 would tell what exists
        section = pipeline_section(pipeline)
        if section is None:
            raise HTTPException(404, f"no pipeline `{pipeline}` (or its config cannot be loaded here)")
        folder = (section.work_dir.resolve() / "reports").resolve()
        file = (folder / path).resolve()
        if not file.is_relative_to(folder) or not file.is_file():
            raise HTTPException(404, f"no report file `{path}` for pipeline `{pipeline}`")
        return FileResponse(file)
