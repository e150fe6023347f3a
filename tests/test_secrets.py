"""The source password never appears in output, logs (at DEBUG), JSON or exception texts."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from binlake import cli
from binlake.config.pipeline_file import load_config
from binlake.errors import SourceConnectionError
from binlake.logs import RedactingFilter, redact, register_secret
from binlake.source.server.connection import connect
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import pipeline_dict, run_binlake

SECRET = "Zq9-very-secret-Pa55word"
WRONG = "Wr0ng-but-still-secret-42"


@pytest.fixture
def secret_user(mariadb: PrivateMariaDB) -> str:
    mariadb.create_user("secret_user", SECRET, "SELECT, REPLICATION SLAVE, REPLICATION CLIENT")
    return "secret_user"


def _config(
    write_config: Callable[[dict[str, Any]], Path],
    mariadb: PrivateMariaDB,
    tmp_path: Path,
    password: str,
    **extra: Any,
) -> Path:
    config = pipeline_dict(mariadb, [r"mysql\.db"], tmp_path, user="secret_user", password=password)
    config["source"].update(extra)
    return write_config(config)


def test_validate_output_and_debug_logs_hide_the_password(
    mariadb: PrivateMariaDB,
    secret_user: str,
    write_config: Callable[..., Path],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = _config(write_config, mariadb, tmp_path, SECRET)
    # As a user runs it: a separate process, DEBUG logs, text and JSON.
    for extra in ([], ["--json"]):
        result = run_binlake("--log-level", "DEBUG", "--config", str(path), "validate", *extra)
        assert "connected to" in result.output  # it really connected with the password
        assert SECRET not in result.output
    # In process, every log record of every logger at DEBUG.
    caplog.set_level(logging.DEBUG)
    cli.main(["--log-level", "DEBUG", "--config", str(path), "validate"])
    captured = capsys.readouterr()
    assert "connecting to 127.0.0.1" in caplog.text  # DEBUG records were captured
    assert SECRET not in caplog.text
    assert SECRET not in captured.out + captured.err


def test_wrong_password_error_hides_it(
    mariadb: PrivateMariaDB, secret_user: str, write_config: Callable[..., Path], tmp_path: Path
) -> None:
    path = _config(write_config, mariadb, tmp_path, WRONG)
    config = load_config(path)
    with pytest.raises(SourceConnectionError) as info:
        connect(config.source)
    assert "access denied" in str(info.value)
    assert WRONG not in str(info.value)
    assert WRONG not in repr(info.value)
    result = run_binlake("--log-level", "DEBUG", "--config", str(path), "validate", "--json")
    assert result.returncode == 1
    assert WRONG not in result.output


def test_config_error_elsewhere_hides_it(
    mariadb: PrivateMariaDB, write_config: Callable[..., Path], tmp_path: Path
) -> None:
    path = _config(write_config, mariadb, tmp_path, SECRET, chunk_size="many", bogus_key=SECRET)
    result = run_binlake("--log-level", "DEBUG", "--config", str(path), "validate")
    assert result.returncode == 1
    assert "source.chunk_size" in result.stdout
    # The value of an unknown key is not echoed either (it could be a misplaced secret).
    assert SECRET not in result.output


def test_redacting_filter_hides_registered_secrets() -> None:
    register_secret(SECRET)
    assert redact(f"url mysql://u:{SECRET}@h/db") == "url mysql://u:***@h/db"
    record = logging.LogRecord("lib", logging.INFO, __file__, 1, "echoed %s", (f"pw={SECRET}",), None)
    assert RedactingFilter().filter(record)
    assert record.getMessage() == "echoed pw=***"
