"""A private MariaDB (or MySQL) server in a temporary folder, for tests, the demo and benchmarks.

The server runs as a child process with its own datadir, socket and a free port on 127.0.0.1, so
it never touches the machine's own database server and several can run side by side. Binlog
settings are the ones binlake needs (ROW, FULL image, FULL metadata) unless a test asks for a
broken server to check that binlake refuses it.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
import pymysql.cursors

from binlake.errors import BinlakeError

log = logging.getLogger(__name__)

#: What binlake's least-privilege user gets (the grant docs/sources.md recommends).
CDC_USER_PRIVILEGES = "SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT"

#: Server options binlake needs; ``None`` means a bare flag.
CDC_OPTIONS: Mapping[str, str | None] = {
    "log-bin": "binlog",
    "binlog-format": "ROW",
    "binlog-row-image": "FULL",
    "binlog-row-metadata": "FULL",
}

_SERVER_BINARIES = ("mariadbd", "mysqld")
_INSTALL_BINARIES = ("mariadb-install-db", "mysql_install_db")
_SBIN_DIRS = ("/usr/sbin", "/usr/local/sbin", "/usr/local/mysql/bin")
_MAX_SOCKET_PATH = 100


class ServerBinaryMissingError(BinlakeError):
    """The MariaDB server binaries are not installed."""


class ServerStartError(BinlakeError):
    """The private server did not start."""


def find_binary(names: tuple[str, ...]) -> str | None:
    """Find the first of ``names`` on PATH or in the usual sbin folders (often not on PATH)."""
    search = os.pathsep.join([os.environ.get("PATH", ""), *_SBIN_DIRS])
    for name in names:
        found = shutil.which(name, path=search)
        if found:
            return found
    return None


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Credentials:
    """How to reach the private server as binlake's CDC user."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)


@dataclass
class PrivateMariaDB:
    """A MariaDB server in its own temporary datadir, on a free 127.0.0.1 port.

    Args:
        base_dir: folder for datadir, socket and logs; a new temporary folder when None.
        options: extra or overriding server options (``{"binlog-format": "STATEMENT"}``);
            a value of ``None`` removes a default option (``{"log-bin": None}`` turns the
            binlog off), ``""`` passes a bare flag.
        server_id: the server's ``server_id``.
        max_binlog_size: bytes per binlog file before rotation (small values for rotation tests).
        user: name of the least-privilege CDC user created at start.
    """

    base_dir: Path | None = None
    options: Mapping[str, str | None] = field(default_factory=dict)
    server_id: int = 1
    max_binlog_size: int = 64 * 1024 * 1024
    user: str = "binlake"
    port: int = 0
    password: str = field(default_factory=lambda: secrets.token_urlsafe(18), repr=False)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _owns_base_dir: bool = field(default=False, init=False, repr=False)

    # -- paths -------------------------------------------------------------------------------

    @property
    def datadir(self) -> Path:
        return self._base / "data"

    @property
    def socket_path(self) -> Path:
        path = self._base / "mysqld.sock"
        if len(str(path)) < _MAX_SOCKET_PATH:
            return path
        # A unix socket path must fit in 108 bytes: deep folders get a short one in /tmp.
        digest = hashlib.sha1(str(self._base).encode()).hexdigest()[:12]
        short = Path(tempfile.gettempdir()) / f"binlake-sock-{digest}"
        short.mkdir(mode=0o700, exist_ok=True)
        return short / "mysqld.sock"

    @property
    def error_log(self) -> Path:
        return self._base / "error.log"

    @property
    def tmpdir(self) -> Path:
        return self._base / "tmp"

    @property
    def _base(self) -> Path:
        if self.base_dir is None:
            raise RuntimeError("the private server has no folder yet: call start() first")
        return self.base_dir

    @property
    def credentials(self) -> Credentials:
        return Credentials("127.0.0.1", self.port, self.user, self.password)

    # -- lifecycle -----------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> PrivateMariaDB:
        """Initialise the datadir (first start only), start the server and create the CDC user."""
        server = find_binary(_SERVER_BINARIES)
        installer = find_binary(_INSTALL_BINARIES)
        if server is None or installer is None:
            raise ServerBinaryMissingError(
                "Could not start a private MariaDB: the server binaries (mariadbd and "
                "mariadb-install-db) are not installed. Fix: run `apt-get install -y "
                "mariadb-server` as root (or `make setup`, which does it when run as root)."
            )
        if self.base_dir is None:
            # Short path: a unix socket path must stay under ~100 bytes.
            self.base_dir = Path(tempfile.mkdtemp(prefix="binlake-mdb-"))
            self._owns_base_dir = True
        # The installer and the server change directory: relative paths would point elsewhere.
        self.base_dir = self.base_dir.resolve()
        self.base_dir.mkdir(parents=True, exist_ok=True)
        first_start = not (self.datadir / "mysql").is_dir()
        self.tmpdir.mkdir(parents=True, exist_ok=True)
        if first_start:
            self._install(installer)
        self._launch(server, timeout)
        if first_start:
            self._create_cdc_user()
        log.info("private MariaDB running on 127.0.0.1:%d (datadir %s)", self.port, self.datadir)
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """Shut the server down cleanly (SIGTERM, then SIGKILL after ``timeout`` seconds)."""
        proc = self._process
        self._process = None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def remove(self) -> None:
        """Stop the server and delete its folder if this object created it."""
        self.stop()
        if self._owns_base_dir and self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> PrivateMariaDB:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.remove()

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # -- connections ---------------------------------------------------------------------------

    def admin_connection(self, database: str | None = None, **kwargs: Any) -> pymysql.Connection[Any]:
        """A root connection over the unix socket (root has no TCP account)."""
        return pymysql.connect(
            unix_socket=str(self.socket_path),
            user="root",
            password="",
            database=database,
            autocommit=True,
            charset="utf8mb4",
            **kwargs,
        )

    def cdc_connection(self, database: str | None = None) -> pymysql.Connection[Any]:
        """A TCP connection as the least-privilege CDC user."""
        return pymysql.connect(
            host="127.0.0.1",
            port=self.port,
            user=self.user,
            password=self.password,
            database=database,
            autocommit=True,
            charset="utf8mb4",
        )

    def execute(self, *statements: str, database: str | None = None) -> None:
        """Run statements as root (test setup)."""
        with contextlib.closing(self.admin_connection(database)) as conn, conn.cursor() as cur:
            for statement in statements:
                cur.execute(statement)

    def query(self, sql: str, args: Any = None, database: str | None = None) -> list[tuple[Any, ...]]:
        """Run one query as root and return all rows."""
        with contextlib.closing(self.admin_connection(database)) as conn, conn.cursor() as cur:
            cur.execute(sql, args)
            return list(cur.fetchall())

    def create_user(self, name: str, password: str, privileges: str, on: str = "*.*") -> None:
        """Create ``name`` for both 127.0.0.1 and localhost (MariaDB matches them separately)."""
        with contextlib.closing(self.admin_connection()) as conn, conn.cursor() as cur:
            for host in ("127.0.0.1", "localhost"):
                cur.execute("CREATE OR REPLACE USER %s@%s IDENTIFIED BY %s", (name, host, password))
                cur.execute(f"GRANT {privileges} ON {on} TO %s@%s", (name, host))

    # -- internals -----------------------------------------------------------------------------

    def _install(self, installer: str) -> None:
        cmd = [
            installer,
            "--no-defaults",
            f"--datadir={self.datadir}",
            # Its own temporary folder: two servers initialised at once in the shared /tmp took
            # each other's temporary tables ("Could not remove temporary table …").
            f"--tmpdir={self.tmpdir}",
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
            *_user_flag(),
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ServerStartError(
                f"Could not initialise a MariaDB datadir in {self.datadir}: "
                f"{installer} exited with {result.returncode}: {result.stderr.strip()[-2000:]}"
            )

    def _server_args(self, server: str) -> list[str]:
        options: dict[str, str | None] = {
            "datadir": str(self.datadir),
            "tmpdir": str(self.tmpdir),
            "socket": str(self.socket_path),
            "pid-file": str(self._base / "mysqld.pid"),
            "log-error": str(self.error_log),
            "bind-address": "127.0.0.1",
            "port": str(self.port),
            "server-id": str(self.server_id),
            "max-binlog-size": str(self.max_binlog_size),
            "skip-name-resolve": "",
            "character-set-server": "utf8mb4",
            "collation-server": "utf8mb4_general_ci",
            # Test and demo data need not survive a power cut; loading 1M rows is 3x faster.
            "innodb-flush-log-at-trx-commit": "2",
            "sync-binlog": "0",
            "innodb-buffer-pool-size": "256M",
            "innodb-log-file-size": "256M",
            "max-allowed-packet": "64M",
            "max-connections": "500",
            **CDC_OPTIONS,
        }
        for key, value in self.options.items():
            options[key] = value
        args = [server, "--no-defaults", *_user_flag()]
        for key, value in options.items():
            if value is None:
                continue
            args.append(f"--{key}" if value == "" else f"--{key}={value}")
        return args

    def _launch(self, server: str, timeout: float) -> None:
        # Ports can be taken between choosing and binding: retry with a new one.
        for attempt in range(3):
            if self.port == 0 or attempt > 0:
                self.port = free_port()
            with open(self._base / "stdout.log", "ab") as out:
                self._process = subprocess.Popen(
                    self._server_args(server),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # Ctrl-C in a test run must not kill it mid-write.
                )
            if self._wait_ready(timeout):
                return
            self.stop(timeout=5)
        tail = self.error_log.read_text(errors="replace")[-3000:] if self.error_log.exists() else ""
        raise ServerStartError(
            f"The private MariaDB in {self._base} did not start within {timeout:.0f} s. "
            f"Its error log ends with:\n{tail}"
        )

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process is None or self._process.poll() is not None:
                return False
            try:
                with contextlib.closing(self.admin_connection(connect_timeout=2)):
                    return True
            except pymysql.err.OperationalError:
                time.sleep(0.05)
        return False

    def _create_cdc_user(self) -> None:
        self.create_user(self.user, self.password, CDC_USER_PRIVILEGES)


def _user_flag() -> list[str]:
    # mariadbd refuses to run as root unless told to.
    return ["--user=root"] if os.geteuid() == 0 else []


@contextlib.contextmanager
def private_mariadb(**kwargs: Any) -> Iterator[PrivateMariaDB]:
    """Start a private server for the duration of a ``with`` block."""
    server = PrivateMariaDB(**kwargs)
    try:
        yield server.start()
    finally:
        server.remove()
