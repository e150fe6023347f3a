"""Helpers for tests: run the CLI as a user would, build pipeline configs for a private server."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from binlake.config import SourceConfig
from binlake.offsets import BinlogOffset
from binlake.source.connection import server_version
from binlake.source.watermarks import current_offset
from binlake.testing.private_server import PrivateMariaDB

BIN = Path(sys.executable).parent


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def run_binlake(*args: str, env: Mapping[str, str] | None = None, timeout: float = 120) -> CliResult:
    """Run the installed ``binlake`` console script as a user would."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [str(BIN / "binlake"), *args], capture_output=True, text=True, env=full_env, timeout=timeout
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def pipeline_dict(
    server: PrivateMariaDB,
    tables: list[str],
    work_dir: Path,
    *,
    user: str | None = None,
    password: str | None = None,
    port: int | None = None,
    **source: Any,
) -> dict[str, Any]:
    """A pipeline config (as a dict) that captures ``tables`` from ``server``."""
    return {
        "pipeline": {"name": "test", "work_dir": str(work_dir), "spark": {"master": "local[2]"}},
        "source": {
            "hostname": "127.0.0.1",
            "port": server.port if port is None else port,
            "username": user or server.user,
            "password": server.password if password is None else password,
            "tables": tables,
            **source,
        },
    }


def source_config(server: PrivateMariaDB, database: str, **options: Any) -> SourceConfig:
    """A source section for ``database`` on a private server, as the CDC user."""
    return SourceConfig(
        hostname="127.0.0.1",
        port=server.port,
        username=server.user,
        password=server.password,  # type: ignore[arg-type]
        tables=[rf"{database}\..*"],
        **options,
    )


def binlog_range(
    server: PrivateMariaDB, database: str, setup: Sequence[str], statements: Sequence[str]
) -> tuple[BinlogOffset, BinlogOffset]:
    """The binlog range (start, end] that ``statements`` wrote, in one session after ``setup``."""
    with contextlib.closing(server.admin_connection(database)) as conn, conn.cursor() as cur:
        for statement in setup:
            cur.execute(statement)
        start = current_offset(conn, server_version(conn))
        for statement in statements:
            cur.execute(statement)
        conn.commit()
        end = current_offset(conn, server_version(conn))
    return BinlogOffset(start.file, start.pos), BinlogOffset(end.file, end.pos)
