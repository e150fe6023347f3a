"""binlake's Airflow plugin: the "Data Docs" link on quality tasks and the reports it opens, and the
lag page (a "Lag" tab on every DAG page — binlake's pipelines fill it — and a "binlake lag" entry in
the UI's menu listing every pipeline)."""

from airflow.plugins_manager import AirflowPlugin

from binlake.airflow.operators import DataDocsLink
from binlake.airflow.page_access import PREFIX
from binlake.airflow.web_app import binlake_app


class BinlakePlugin(AirflowPlugin):
    # Lists and dicts: Airflow's plugin interface (ruff's RUF012 would have them ClassVar).
    name = "binlake"
    operator_extra_links = [DataDocsLink()]  # noqa: RUF012
    fastapi_apps = [{"app": binlake_app(), "url_prefix": PREFIX, "name": "binlake"}]  # noqa: RUF012
    external_views = [  # noqa: RUF012
        {
            "name": "Lag",
            "href": f"{PREFIX}/lag/dag/{{DAG_ID}}",
            "destination": "dag",
            "url_route": "binlake-lag",
        },
        {
            "name": "binlake lag",
            "href": f"{PREFIX}/lag/",
            "destination": "nav",
            "url_route": "binlake-pipelines",
        },
    ]
