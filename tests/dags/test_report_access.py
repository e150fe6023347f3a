"""Who may read a pipeline's Data Docs: the users Airflow's auth manager lets read the pipeline's
DAG. Real Airflow in multi-team mode (its simple auth manager's way of restricting DAGs): the DAG
folder's bundle belongs to team `data`; `analyst` is in it, `outsider` is a viewer of team `other`.
The API server serves binlake's app; each user signs in for a token and asks for a report and the
lag page."""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.dags.conftest import BIN, airflow_pipeline, wait_for

pytestmark = pytest.mark.slow

BUNDLES = [{"name": "dags-folder", "classpath": "airflow.dag_processing.bundles.local.LocalDagBundle",
            "kwargs": {}, "team_name": "data"}]  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str, token: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def _text(url: str, token: str) -> str:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(response.read().decode())


def _token(url: str, user: str, password: str) -> str:
    request = urllib.request.Request(
        f"{url}/auth/token", data=json.dumps({"username": user, "password": password}).encode(),
        headers={"Content-Type": "application/json"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=30) as response:
        return str(json.loads(response.read())["access_token"])


def test_reports_are_served_only_to_users_who_may_read_the_pipelines_dag(
    database: str, tmp_path: Path, local_airflow: Any
) -> None:
    work = tmp_path / "work"
    report = work / "reports" / "run-1" / "index.html"
    report.parent.mkdir(parents=True)
    report.write_text("<html><body>quality of demo</body></html>")
    airflow = local_airflow(airflow_pipeline(database, work))
    airflow.env.update({
        "AIRFLOW__CORE__MULTI_TEAM": "true",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": "analyst:viewer:data,outsider:viewer:other",
        "AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST": json.dumps(BUNDLES),
    })  # fmt: skip
    for team in ("data", "other"):
        created = airflow.run("teams", "create", team)
        assert created.returncode == 0, created.output[-2000:]
    parsed = airflow.run("dags", "reserialize")  # the DAGs, in the team's bundle
    assert parsed.returncode == 0, parsed.output[-2000:]
    assert airflow.query("SELECT bundle_name FROM dag WHERE dag_id = 'binlake__demo'") == [("dags-folder",)]

    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "api-server.log").open("w")
    server = subprocess.Popen(
        [str(BIN / "airflow"), "api-server", "--port", str(port), "--host", "127.0.0.1"],
        env=airflow.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    try:
        wait_for("the API server", lambda: _get(f"{url}/api/v2/monitor/health") == 200, timeout=180)
        passwords = json.loads((airflow.home / "simple_auth_manager_passwords.json.generated").read_text())
        page = f"{url}/binlake/reports/demo/run-1/index.html"
        assert _get(page) == 401  # not signed in
        assert _get(page, _token(url, "analyst", passwords["analyst"])) == 200
        outsider = _token(url, "outsider", passwords["outsider"])
        assert _get(page, outsider) == 403
        assert _get(f"{url}/binlake/reports/nothing-here/run-1/index.html", outsider) in (403, 404)
        # The lag page: the same rule (it names the pipeline's tables); the index lists only theirs.
        analyst = _token(url, "analyst", passwords["analyst"])
        lag = f"{url}/binlake/lag/demo"
        assert _get(lag) == 401
        assert _get(lag, analyst) == 200
        assert _get(f"{url}/binlake/lag/dag/binlake__demo__backfill", analyst) == 200
        assert _get(lag, outsider) == 403
        assert _get(f"{url}/binlake/lag/dag/binlake__demo", outsider) == 403
        assert "/binlake/lag/demo" in _text(f"{url}/binlake/lag/", analyst)
        assert "/binlake/lag/demo" not in _text(f"{url}/binlake/lag/", outsider)
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
