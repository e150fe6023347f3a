"""Who holds a lease: one run of a command in one process (host, pid, the process's start time and a
random token), never a role — two ``binlake stream`` processes are two holders.

A holder on this host whose process is gone (killed, crashed) is known to be gone at once, so a
restart after ``kill -9`` takes its lease over without waiting for it to expire; a holder on
another host is taken over only once its lease has expired.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import uuid
from dataclasses import asdict, dataclass

import psutil


@dataclass(frozen=True)
class Holder:
    """One run of a command in one process."""

    command: str
    """What runs, as people type it: ``binlake stream``."""
    token: str
    host: str
    pid: int
    started: float
    """The process's start time (seconds since the epoch): a reused pid is another process."""
    scope: str = ""
    """What this run writes, as its writer lease's key (``state/writers.py``): the command itself,
    or a part of it that runs of the same command share out (one group of a snapshot's chunks)."""

    @classmethod
    def this_process(cls, command: str, part: str = "") -> Holder:
        """A new holder for a run of ``command`` (of its ``part`` only, if given) in this process."""
        pid = os.getpid()
        scope = f"{command} {part}" if part else command
        return cls(command, uuid.uuid4().hex, socket.gethostname(), pid, _started(pid) or 0.0, scope)

    @property
    def key(self) -> str:
        return self.scope or self.command

    def describe(self, since: dt.datetime | None = None) -> str:
        at = f" since {since:%Y-%m-%d %H:%M:%S} UTC" if since is not None else ""
        return f"`{self.key}` (pid {self.pid} on {self.host}{at})"

    def gone(self) -> bool:
        """Whether this holder's process is known to have ended (only a process of this host can be)."""
        if self.host != socket.gethostname():
            return False
        started = _started(self.pid)
        return started is None or abs(started - self.started) > 1.0

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Holder:
        return cls(**json.loads(text))


def _started(pid: int) -> float | None:
    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:  # no such process, or not ours to look at: a zombie counts as gone
        return None
