"""The demo's long-lived private MariaDB: started by ``make demo``, kept between runs.

Unlike the test fixture's server, this one outlives the process that started it, so its port and
the CDC user's password are kept in ``<dir>/demo.env`` (mode 0600) for the pipeline config to
read through ``${BINLAKE_DEMO_PORT}`` and ``${BINLAKE_DEMO_PASSWORD}``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import time
from pathlib import Path
from typing import Any

import pymysql

from binlake.errors import BinlakeError
from binlake.testing import demo
from binlake.testing.demo import DEMO_DATABASE
from binlake.testing.private_server import PrivateMariaDB

log = logging.getLogger(__name__)

ENV_FILE = "demo.env"


def _read_env(directory: Path) -> dict[str, str]:
    path = directory / ENV_FILE
    if not path.exists():
        return {}
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k.strip(): v.strip() for k, v in pairs}


def _write_env(directory: Path, server: PrivateMariaDB) -> None:
    path = directory / ENV_FILE
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(
        f"BINLAKE_DEMO_HOST=127.0.0.1\nBINLAKE_DEMO_PORT={server.port}\n"
        f"BINLAKE_DEMO_USER={server.user}\nBINLAKE_DEMO_PASSWORD={server.password}\n"
        f"BINLAKE_DEMO_SOCKET={server.socket_path}\n"
    )


def _server(directory: Path, env: dict[str, str]) -> PrivateMariaDB:
    kwargs: dict[str, object] = {"base_dir": directory / "mariadb"}
    if env:
        kwargs.update(port=int(env["BINLAKE_DEMO_PORT"]), password=env["BINLAKE_DEMO_PASSWORD"])
    return PrivateMariaDB(**kwargs)  # type: ignore[arg-type]


def _alive(server: PrivateMariaDB) -> bool:
    try:
        with contextlib.closing(server.admin_connection(connect_timeout=2)):
            return True
    except (pymysql.err.OperationalError, FileNotFoundError):
        return False


def up(directory: Path, rows: int, reload: bool = False) -> PrivateMariaDB:
    """Start (or reuse) the demo server in ``directory`` and make sure the demo data is loaded."""
    directory.mkdir(parents=True, exist_ok=True)
    env = _read_env(directory)
    server = _server(directory, env)
    if env and _alive(server):
        print(f"demo MariaDB already running on 127.0.0.1:{server.port}")
    else:
        server.start()
        _write_env(directory, server)
        print(f"demo MariaDB started on 127.0.0.1:{server.port} (datadir {server.datadir})")
    loaded = server.query(
        "SELECT COUNT(*) FROM information_schema.TABLES WHERE TABLE_SCHEMA = %s", (demo.DEMO_DATABASE,)
    )[0][0]
    if reload or not loaded:
        print(f"loading the demo database `{demo.DEMO_DATABASE}` with {rows:,} rows …")
        started = time.monotonic()
        demo.load(
            server.admin_connection,
            rows,
            progress=lambda t, n, s: print(f"  {t:<12} {n:>9,} rows  {n / max(s, 1e-6):>9,.0f} rows/s"),
        )
        print(f"loaded in {time.monotonic() - started:.1f} s")
    return server


def down(directory: Path) -> bool:
    """Stop the demo server in ``directory``; False if it was not running."""
    pid_file = directory / "mariadb" / "mysqld.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().strip())
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    for _ in range(300):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    os.kill(pid, signal.SIGKILL)
    return True


def connect_admin(directory: Path) -> pymysql.Connection[Any]:
    """A root connection to the running demo server."""
    env = _read_env(directory)
    if not env:
        raise BinlakeError(f"there is no demo server in {directory}: start it with `make demo` first")
    return _server(directory, env).admin_connection()


def load_into(host: str, port: int, user: str, rows: int, wait: float) -> None:
    """Load the demo database into a server of the user's (docker-compose's MySQL), once it answers.

    The password comes from ``BINLAKE_LOAD_PASSWORD``, never from the command line. A database that
    is there already is kept (a restarted container does not reload it).
    """
    password = os.environ.get("BINLAKE_LOAD_PASSWORD", "")

    def connect() -> pymysql.Connection[Any]:
        return pymysql.connect(host=host, port=port, user=user, password=password, autocommit=True)

    deadline = time.monotonic() + wait
    while True:
        try:
            conn = connect()
            break
        except pymysql.err.OperationalError as e:
            if time.monotonic() > deadline:
                raise BinlakeError(
                    f"Cannot load the demo database: {user}@{host}:{port} did not answer within {wait:g} s "
                    f"({e.args[-1]}). Fix: check that the server runs and the user and password are right."
                ) from None
            time.sleep(2)
    with contextlib.closing(conn), conn.cursor() as cur:
        cur.execute(
            "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = %s", (DEMO_DATABASE,)
        )
        if cur.fetchone()[0]:
            print(f"`{DEMO_DATABASE}` is there already: kept")
            return
    demo.load(connect, rows)
    print(f"loaded `{DEMO_DATABASE}` ({rows:,} rows) into {host}:{port}")
