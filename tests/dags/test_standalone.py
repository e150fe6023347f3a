"""``make airflow`` stops everything it started: the supervisor of ``airflow standalone`` stops the
command and every process below it — also those in sessions of their own, orphaned, or ignoring
SIGTERM — on SIGTERM and on Ctrl-C (SIGINT). A stand-in command builds such a tree of processes:
starting real Airflow here would add a minute and prove nothing more about the stopping."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: A main process with a child and grandchild, one in a session of its own that ignores SIGTERM.
TREE = """
setsid bash -c 'trap "" TERM; while true; do sleep 1; done' &
bash -c 'sleep 600 & wait' &
sleep 600 &
wait
"""


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_every_process_it_started_is_stopped(number: signal.Signals) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "include")}
    supervisor = subprocess.Popen(
        [sys.executable, "-m", "binlake.airflow.standalone", "--grace", "2", "--", "bash", "-c", TREE],
        env=env, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        tree: list[psutil.Process] = []
        while time.monotonic() < deadline:
            tree = psutil.Process(supervisor.pid).children(recursive=True)
            if sum(p.name() == "sleep" for p in tree) >= 3:
                break
            time.sleep(0.2)
        assert len(tree) >= 5, [p.cmdline() for p in tree]
        supervisor.send_signal(number)
        _, stderr = supervisor.communicate(timeout=60)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    alive = [p for p in tree if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert alive == [], [p.cmdline() for p in alive]
    assert supervisor.returncode == 0, stderr
    assert "stopping bash and the processes it started" in stderr
    assert "0 left" in stderr
