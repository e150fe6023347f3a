"""The Airflow UI in a real browser: `airflow standalone` as `make airflow` runs it (under binlake's
supervisor), Debian's Chromium through playwright. Log in, trigger the pipeline DAG with its form
(`stream_mode: until-caught-up`), wait for it to succeed, open the grid and the quality task's Data
Docs link, trigger the backfill DAG with a table in its form; then stop Airflow with SIGTERM and
find none of its processes left. After a stream applied three changes, the DAG's "Lag" tab shows
them. Screenshots are kept in the test's folder."""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from binlake.testing import demo
from binlake.testing.compare import compare
from binlake.testing.private_server import PrivateMariaDB
from tests.dags.conftest import BIN, airflow_pipeline, config_of, wait_for

pytestmark = pytest.mark.slow
CHROMIUM = "/usr/bin/chromium"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v2/monitor/health", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _standalone(airflow: Any, port: int) -> subprocess.Popen[str]:
    env = {
        **airflow.env,
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__PARALLELISM": "4",
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "false",
        "AIRFLOW__API__HOST": "127.0.0.1",
        "AIRFLOW__API__PORT": str(port),
        "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{port}",
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
    }
    log = (airflow.home / "standalone.log").open("w")
    return subprocess.Popen(
        [sys.executable, "-m", "binlake.airflow.standalone", "--grace", "20"],
        env=env, stdout=log, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip


def _state(airflow: Any, dag_id: str) -> str | None:
    rows = airflow.query("SELECT state FROM dag_run WHERE dag_id = ? ORDER BY id DESC LIMIT 1", dag_id)
    return str(rows[0][0]) if rows else None


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _ended(airflow: Any, dag_id: str) -> str | None:
    state = _state(airflow, dag_id)
    return state if state in ("success", "failed") else None


def _stream_changes(mariadb: PrivateMariaDB, database: str, pipeline: dict[str, Any], folder: Path) -> None:
    """Three changes to orders, applied by `binlake stream --until-caught-up` (the same state store)."""
    with contextlib.closing(mariadb.admin_connection()) as conn, conn.cursor() as cursor:
        cursor.execute(f"UPDATE `{database}`.orders SET total = total + 1 ORDER BY id LIMIT 3")
        conn.commit()
    raw = config_of(pipeline, mariadb).model_dump(mode="json", exclude_none=True)
    raw["source"]["password"] = mariadb.password
    config = folder / "cli-pipeline.yaml"
    config.write_text(yaml.safe_dump(raw))
    done = subprocess.run(
        [str(BIN / "binlake"), "--config", str(config), "stream", "--until-caught-up"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def _trigger(page: Any, shots: Path, name: str) -> None:
    """Open the DAG page's trigger form."""
    page.get_by_role("button", name="Trigger").first.click()
    page.get_by_role("dialog").wait_for()
    page.screenshot(path=str(shots / f"{name}.png"))


def test_the_ui_triggers_the_pipeline_and_the_backfill_and_opens_the_data_docs(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, local_airflow: Any
) -> None:
    from playwright.sync_api import sync_playwright

    demo.load(mariadb.admin_connection, 500, database=database)
    pipeline = airflow_pipeline(database, tmp_path / "work")
    airflow = local_airflow(pipeline)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    supervisor = _standalone(airflow, port)
    shots = tmp_path / "screenshots"
    shots.mkdir()
    tree: list[psutil.Process] = []
    try:
        wait_for("the Airflow API server", lambda: _up(url), timeout=240)
        password = json.loads((airflow.home / "simple_auth_manager_passwords.json.generated").read_text())[
            "admin"
        ]
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM)
            page = browser.new_page(viewport={"width": 1440, "height": 1000})
            page.set_default_timeout(60_000)
            page.goto(url)
            page.get_by_label("Username").fill("admin")
            page.get_by_label("Password").fill(password)
            page.screenshot(path=str(shots / "01-login.png"))
            page.get_by_role("button", name="Sign in").click()
            page.wait_for_url(lambda address: "login" not in address)  # signed in: the home page
            page.get_by_role("link", name="Dags").first.wait_for()
            wait_for("the pipeline DAG to be parsed", lambda: airflow.query(
                "SELECT 1 FROM dag WHERE dag_id = 'binlake__demo'"), timeout=180)  # fmt: skip
            page.goto(f"{url}/dags/binlake__demo")
            page.get_by_text("quality_after_stream").first.wait_for()  # the DAG's tasks, rendered
            page.screenshot(path=str(shots / "02-dag.png"))
            _trigger(page, shots, "03-trigger-pipeline")
            mode = page.get_by_role("dialog").get_by_role("combobox").first
            mode.click()
            mode.press_sequentially("until")
            page.get_by_role("option", name="until-caught-up").click()
            page.screenshot(path=str(shots / "04-form-filled.png"))
            page.get_by_role("dialog").get_by_role("button", name="Trigger").click()
            wait_for("the pipeline run to start", lambda: _state(airflow, "binlake__demo"), timeout=60)
            state = wait_for("the pipeline run to end", lambda: _ended(airflow, "binlake__demo"), timeout=900)
            [(run_id, conf)] = airflow.query(
                "SELECT run_id, conf FROM dag_run WHERE dag_id = 'binlake__demo'"
            )
            page.goto(f"{url}/dags/binlake__demo/runs/{run_id}")
            page.wait_for_timeout(2000)
            page.screenshot(path=str(shots / "05-grid.png"), full_page=True)
            assert state == "success", airflow.task_states("binlake__demo")
            assert "until-caught-up" in str(conf)

            _stream_changes(mariadb, database, pipeline, tmp_path)  # batches for the lag page to plot
            page.goto(f"{url}/dags/binlake__demo")
            page.get_by_role("link", name="Lag", exact=True).click()  # the plugin's tab on the DAG page
            lag = page.frame_locator("iframe").first
            lag.get_by_text(f"{database}.orders").first.wait_for()
            lag.locator("svg").first.wait_for()  # the plot of the batches
            page.screenshot(path=str(shots / "05-lag-tab.png"), full_page=True)
            orders = lag.locator("tbody tr", has_text=f"{database}.orders").inner_text()
            assert "streaming" in orders
            assert "\t3\t" in orders  # the three changes below, in the last 6 h

            page.goto(f"{url}/dags/binlake__demo/runs/{run_id}/tasks/quality/details")
            link = page.get_by_role("link", name="Data Docs")  # the extra link, on the Details tab
            link.wait_for()
            page.screenshot(path=str(shots / "06-quality-task.png"), full_page=True)
            href = link.get_attribute("href")
            assert href is not None
            assert href.startswith(f"{url}/binlake/reports/demo/")
            report = page  # the same session: reports are for signed-in users
            response = report.goto(href)
            report.screenshot(path=str(shots / "07-data-docs-opened.png"), full_page=True)
            assert response is not None
            assert response.status == 200, report.inner_text("body")[:500]
            report.locator("table tbody tr").first.wait_for()
            report.screenshot(path=str(shots / "07-data-docs.png"), full_page=True)
            assert f"{database}.orders" in report.inner_text("body")

            page.goto(f"{url}/dags/binlake__demo__backfill")
            page.get_by_text("wait_applied").first.wait_for()
            _trigger(page, shots, "08-trigger-backfill")
            page.get_by_role("dialog").get_by_role("textbox").first.fill(f"{database}.orders")
            page.screenshot(path=str(shots / "09-backfill-form.png"))
            page.get_by_role("dialog").get_by_role("button", name="Trigger").click()
            backfill = "binlake__demo__backfill"
            planned = wait_for("the backfill's plan", lambda: airflow.task_states(backfill).get(("plan", -1))
                               in ("success", "failed"), timeout=300)  # fmt: skip
            [(conf,)] = airflow.query("SELECT conf FROM dag_run WHERE dag_id = ?", backfill)
            page.goto(f"{url}/dags/{backfill}")
            page.get_by_text("wait_applied").first.wait_for()
            page.screenshot(path=str(shots / "10-backfill-run.png"), full_page=True)
            assert planned
            assert airflow.task_states(backfill)[("plan", -1)] == "success"
            assert json.loads(conf)["tables"] == [f"{database}.orders"]  # the form's value, as a list
            browser.close()
        tree = psutil.Process(supervisor.pid).children(recursive=True)
    finally:
        if not tree:
            tree = (
                psutil.Process(supervisor.pid).children(recursive=True) if supervisor.poll() is None else []
            )
        supervisor.send_signal(signal.SIGTERM)
        supervisor.wait(timeout=120)
    alive = [p for p in tree if _alive(p)]
    assert alive == [], [p.cmdline()[:3] for p in alive]
    assert supervisor.returncode == 0
    assert [r for r in compare(config_of(pipeline, mariadb)) if not r.equal] == []
