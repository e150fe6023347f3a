"""binlake's pages in the Airflow UI: one FastAPI app, mounted by the plugin under ``/binlake``,
serving each pipeline's Data Docs (``reports``) and its lag page (``lag_page``)."""

from typing import Any

from binlake.airflow.lag_page import add_lag_routes
from binlake.airflow.reports import add_report_routes


def binlake_app() -> Any:
    """The FastAPI app of binlake's pages; every route asks for a signed-in user (Airflow's session
    cookie from the UI, or a bearer token): reports show sample values of the data, the lag page
    the pipeline's tables."""
    from airflow.api_fastapi.core_api.security import get_user
    from fastapi import Depends, FastAPI

    app = FastAPI(title="binlake", dependencies=[Depends(get_user)])
    add_report_routes(app)
    add_lag_routes(app)
    return app
