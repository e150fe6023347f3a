"""A soak you can rerun: the demo workload for N minutes while the stream is killed with kill -9 at
random moments, the source server is restarted twice and a second stream is started beside the
first once; it ends with `binlake verify` and prints JSON.

    .venv/bin/python bench/soak.py [--minutes 20] [--rows 20000] [--rate 200] [--seed 7]

Figures: ``kills`` (stream process groups killed with SIGKILL), ``restarts`` (source server
restarts), ``refused_second_writer`` (the second stream refused, naming the first), ``changes``
(workload statements that committed), ``drifted_chunks`` (verify's verdict at the end: 0 is the
goal), ``stream_exits`` (streams that stopped by themselves: after a server restart they must).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pymysql
import yaml

from binlake.testing import demo
from binlake.testing.private_server import PrivateMariaDB, private_mariadb
from binlake.testing.workload import Workload

BIN = Path(sys.executable).parent / "binlake"


def _config(server: PrivateMariaDB, work: Path) -> Path:
    raw = {
        "pipeline": {"name": "soak", "work_dir": str(work), "parallelism": 2, "spark": {"master": "local[2]"},
                     "writer_lease_s": 20},
        "source": {"hostname": "127.0.0.1", "port": server.port, "username": server.user,
                   "password": server.password, "tables": [r"shop\..*"], "chunk_size": 2000,
                   "chunk_key_columns": {"shop.page_views": "customer_id"}},
        "stream": {"trigger_interval_s": 2},
    }  # fmt: skip
    path = work / "soak.yaml"
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(raw))
    return path


def _binlake(path: Path, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), "--config", str(path), *args], capture_output=True, text=True, timeout=timeout
    )


def _stream(path: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [str(BIN), "--config", str(path), "stream"], stdout=out, stderr=out, start_new_session=True
        )


class _Writes:
    """The demo workload in slices, going on across server restarts (a slice that fails is retried)."""

    def __init__(self, server: PrivateMariaDB, rate: float, seed: int) -> None:
        self.server, self.rate, self.seed = server, rate, seed
        self.changes = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            try:
                stats = Workload(self.server.admin_connection, database="shop", rate=self.rate, txn_size=2,
                                 seed=self.seed * 1000 + n).run(seconds=5)  # fmt: skip
                self.changes += stats.total
            except (pymysql.err.MySQLError, OSError):
                time.sleep(1)  # the server restarts: write on once it is back


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=20.0)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    result: dict[str, Any] = {"benchmark": "soak", "minutes": args.minutes, "kills": 0, "restarts": 0,
                              "stream_exits": 0, "refused_second_writer": False}  # fmt: skip
    with private_mariadb() as server, tempfile.TemporaryDirectory(prefix="binlake-soak-") as folder:
        work = Path(folder)
        demo.load(server.admin_connection, args.rows)
        path, log = _config(server, work), work / "stream.log"
        for step in ("plan", "snapshot"):
            done = _binlake(path, step)
            assert done.returncode == 0, done.stderr[-2000:]
        writes = _Writes(server, args.rate, args.seed)
        writes.thread.start()
        deadline = time.monotonic() + args.minutes * 60
        restarts_at = sorted(rng.uniform(0.2, 0.8) * args.minutes * 60 for _ in range(2))
        second_at = rng.uniform(0.3, 0.6) * args.minutes * 60
        started = time.monotonic()
        stream = _stream(path, log)
        try:
            while time.monotonic() < deadline:
                time.sleep(rng.uniform(20, 60))
                elapsed = time.monotonic() - started
                if stream.poll() is not None:
                    result["stream_exits"] += 1
                elif restarts_at and elapsed >= restarts_at[0]:
                    restarts_at.pop(0)
                    server.stop()
                    time.sleep(rng.uniform(2, 8))
                    server.start()
                    result["restarts"] += 1
                    continue
                elif not result["refused_second_writer"] and elapsed >= second_at:
                    second = _binlake(path, "stream", timeout=600)
                    last = (second.stderr.strip().splitlines() or [""])[-1]
                    result["refused_second_writer"] = (
                        second.returncode == 3 and "already has a writer" in last
                    )
                    result["second_writer_said"] = last[:400]
                    continue
                else:
                    os.killpg(stream.pid, signal.SIGKILL)
                    stream.wait()
                    result["kills"] += 1
                stream = _stream(path, log)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(stream.pid, signal.SIGKILL)
            stream.wait()
            writes.stop.set()
            writes.thread.join(60)
        result["changes"] = writes.changes
        caught_up = _binlake(path, "stream", "--until-caught-up")
        assert caught_up.returncode == 0, caught_up.stderr[-3000:]
        verify = _binlake(path, "verify", "--json")
        report = json.loads(verify.stdout.strip().splitlines()[-1])
        tables = report["tables"].values()
        result["verified_chunks"] = sum(t["chunks"] for t in tables)
        result["drifted_chunks"] = sum(len(t["drifted"]) for t in tables)
        result["unverified_chunks"] = sum(len(t["unverified"]) for t in tables)
        result["verify_clean"] = bool(report["clean"]) and verify.returncode == 0
    print(json.dumps(result))


if __name__ == "__main__":
    main()
