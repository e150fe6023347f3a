"""The stream's start-up asks the source through one session: discovery, the cascade refusal, the
start position and the binlog it needs — counted by the server itself (``Connections``). It opens
no Iceberg catalog of its own: it works in the stream's, opened once."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

import binlake.sink.catalog
from binlake.sink.catalog import open_catalog
from binlake.state.store import StateStore
from binlake.stream.preflight import preflight
from binlake.testing.private_server import PrivateMariaDB
from tests.helpers import stream_config


def test_the_start_up_opens_one_source_session_and_no_catalog(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mariadb.execute(
        "CREATE TABLE t (id INT PRIMARY KEY)", "CREATE TABLE u (id INT PRIMARY KEY)", database=database
    )
    config = stream_config(mariadb, database, tmp_path, startup_mode="latest-offset")
    with contextlib.closing(mariadb.admin_connection()) as admin, admin.cursor() as cursor:

        def connections() -> int:
            cursor.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
            return int(cursor.fetchone()[1])

        catalog = open_catalog(config)
        loaded: list[str] = []
        load = binlake.sink.catalog.load_catalog

        def counted(name: str, **properties: Any) -> Any:
            loaded.append(name)
            return load(name, **properties)

        monkeypatch.setattr(binlake.sink.catalog, "load_catalog", counted)
        with StateStore(config.pipeline.resolved_state_uri) as store:
            before = connections()
            first = preflight(
                config, store, catalog
            )  # a new stream: latest-offset, the tables begin the history
            opened_new = connections() - before
            before = connections()
            again = preflight(config, store, catalog)  # resumed where the first left it
            opened_resumed = connections() - before
    assert sorted(s.table.table for s in first.schemas) == ["t", "u"]
    assert first.start.reason == "latest-offset"
    assert again.start.reason == "resumed"
    assert (opened_new, opened_resumed) == (1, 1)
    assert loaded == []
