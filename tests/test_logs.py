"""binlake's log handler writes to the ``sys.stderr`` of the moment: Airflow's task runner and
pytest swap it, and a handler still holding a closed one made every later record an error report
— which, with py4j at DEBUG, never ended (a Spark call's error string is itself a py4j call)."""

from __future__ import annotations

import io
import logging
import sys

import pytest

from binlake.logs import setup_logging


def test_records_go_to_the_stderr_of_the_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    setup_logging("INFO")
    logging.getLogger("binlake.test").info("to the first")
    first.close()  # as a task runner's or a test's capture is closed
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    logging.getLogger("binlake.test").info("to the second")
    assert "to the second" in second.getvalue()
    assert "Logging error" not in second.getvalue()
