"""The DAG tasks' own work, without Airflow: chunk groups for the mapped snapshot jobs."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import yaml

from binlake.airflow.tasks import plan_chunk_groups
from binlake.planner import plan
from binlake.source.chunks.watermarks import current_offset
from binlake.source.server.connection import server_version
from binlake.state.store import StateStore
from binlake.testing.private_server import PrivateMariaDB
from tests.dags.conftest import airflow_pipeline, config_of
from tests.helpers import config_dict


def test_chunk_groups_spread_the_unfinished_chunks_and_a_rerun_skips_finished_ones(
    mariadb: PrivateMariaDB, database: str, tmp_path: Path
) -> None:
    mariadb.execute(
        "CREATE TABLE a (id INT PRIMARY KEY)",
        "INSERT INTO a SELECT seq FROM seq_1_to_2500",
        "CREATE TABLE b (id INT PRIMARY KEY)",
        "INSERT INTO b SELECT seq FROM seq_1_to_1000",
        database=database,
    )
    pipeline: dict[str, Any] = airflow_pipeline(database, tmp_path / "work")
    config = config_of(pipeline, mariadb)
    raw = config_dict(config)
    raw.pop("airflow")  # the source is in the file: no Airflow connection to read
    path = tmp_path / "demo.yaml"
    path.write_text(yaml.safe_dump(raw))

    groups = plan_chunk_groups(path, 3)
    chunks = [c for group in groups for c in group]
    planned = {f"{p.table.name}#{c.chunk.chunk_id}" for p in plan(config) for c in p.chunks}
    # About 5 chunks of a and 2 of b (500 rows each; the even split's step follows the server's
    # row estimate, so one more or less).
    assert 6 <= len(planned) <= 9
    assert len(groups) == 3
    assert len(chunks) == len(set(chunks))
    assert set(chunks) == planned

    # Chunks a snapshot job finished are left out of the next run's groups.
    store = StateStore(config.pipeline.resolved_state_uri)
    [done] = [p for p in plan(config) if p.table.table == "a"]
    store.plans("demo").finish_chunks(
        [(done.table, c.chunk.chunk_id, None, _head(mariadb), 1) for c in done.chunks]
    )
    rerun = plan_chunk_groups(path, 3)
    assert sorted(c for g in rerun for c in g) == sorted(c for c in chunks if c.startswith(f"{database}.b#"))


def _head(mariadb: PrivateMariaDB) -> Any:
    with contextlib.closing(mariadb.admin_connection()) as conn:
        return current_offset(conn, server_version(conn))
