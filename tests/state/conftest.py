"""The state store of a test: SQLite (the default) and PostgreSQL (at scale), each test its own."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

from binlake.state.store import StateStore

POSTGRES = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path / 'deep' / 'state.db'}"
        yield StateStore(uri)
        return
    # A database of the test's own on the machine's PostgreSQL (the at-scale state store).
    name = f"binlake_test_{uuid.uuid4().hex[:10]}"
    admin = sqlalchemy.create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    state = StateStore(POSTGRES.rsplit("/", 1)[0] + f"/{name}")
    try:
        yield state
    finally:
        state.close()
        with admin.connect() as conn:
            conn.execute(sqlalchemy.text(f'DROP DATABASE "{name}"'))
        admin.dispose()
