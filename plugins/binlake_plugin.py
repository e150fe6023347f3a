"""binlake's Airflow plugin: the "Data Docs" link on quality tasks, and the reports it opens."""

from airflow.plugins_manager import AirflowPlugin

from binlake.airflow.operators import DataDocsLink
from binlake.airflow.reports import PREFIX, reports_app


class BinlakePlugin(AirflowPlugin):
    name = "binlake"
    operator_extra_links = [DataDocsLink()]  # noqa: RUF012 (Airflow's plugin interface)
    fastapi_apps = [{"app": reports_app(), "url_prefix": PREFIX, "name": "binlake reports"}]  # noqa: RUF012
