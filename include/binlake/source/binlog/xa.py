"""XA transactions in the binlog: rows written at ``XA PREPARE``, decided later.

MySQL (5.7.7+) and MariaDB (10.5+) write an XA transaction's rows when it is *prepared*, as an
event group of its own that ends with an ``XA_PREPARE_LOG_EVENT`` (MariaDB flags the group's GTID
event ``FL_PREPARED_XA``; MySQL starts it with ``XA START``). The decision comes later, maybe files
later, as a statement of its own: ``XA COMMIT X'…',X'…',n`` or ``XA ROLLBACK …``. Other
transactions commit in between, and a prepared transaction's rows are invisible to every reader
until its commit — so its changes belong at the commit's position, and nowhere on rollback.
(``XA COMMIT … ONE PHASE`` is an ordinary transaction in the binlog, or a group whose prepare event
says "one phase": committed where it ends.)

This module names the transactions (``Xid``, as the server writes them) and finds where one was
prepared (``XaLocator``) when its commit is read without its prepare — a chunk's correction, a
stream segment or a backfill that starts between the two.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal, NamedTuple

from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset

log = logging.getLogger(__name__)

#: MariaDB GTID event flags (``gtid_event`` in MariaDB's replication protocol).
FL_PREPARED_XA = 64
FL_COMPLETED_XA = 128

_STATEMENT = re.compile(
    r"^\s*XA\s+(?P<verb>START|BEGIN|END|PREPARE|COMMIT|ROLLBACK)\b\s*(?P<xid>.*?)"
    r"(?P<one_phase>\s+ONE\s+PHASE)?\s*(?:/\*.*\*/)?\s*;?\s*$",
    re.IGNORECASE | re.DOTALL,
)
# One part of an xid: a hex literal (what servers write), a quoted string, or a number.
_PART = re.compile(r"\s*(?:X'(?P<hex>[0-9A-Fa-f]*)'|'(?P<text>(?:[^'\\]|\\.|'')*)'|(?P<number>\d+))\s*")


class XaError(BinlakeError):
    """An XA transaction's rows cannot be known (its prepare is not in the binlog)."""


@dataclass(frozen=True)
class Xid:
    """An XA transaction id: format id, global transaction id and branch qualifier."""

    format_id: int
    gtrid: bytes
    bqual: bytes

    def __str__(self) -> str:
        return f"X'{self.gtrid.hex()}',X'{self.bqual.hex()}',{self.format_id}"

    @classmethod
    def parse(cls, text: str) -> Xid:
        """An xid as servers write it (``X'7831',X'',1``) or as a user does (``'x1'``, ``'x1','b',3``)."""
        parts: list[bytes | int] = []
        rest = text.strip()
        while rest:
            match = _PART.match(rest)
            if match is None:
                raise ValueError(f"`{text}` is not an XA transaction id")
            if match.group("hex") is not None:
                parts.append(bytes.fromhex(match.group("hex")))
            elif match.group("text") is not None:
                parts.append(match.group("text").replace("''", "'").encode())
            else:
                parts.append(int(match.group("number")))
            rest = rest[match.end() :].lstrip()
            if rest.startswith(","):
                rest = rest[1:]
            elif rest:
                raise ValueError(f"`{text}` is not an XA transaction id")
        if not parts or not isinstance(parts[0], bytes) or len(parts) > 3:
            raise ValueError(f"`{text}` is not an XA transaction id")
        bqual = parts[1] if len(parts) > 1 else b""
        format_id = parts[2] if len(parts) > 2 else 1
        if not isinstance(bqual, bytes) or not isinstance(format_id, int):
            raise ValueError(f"`{text}` is not an XA transaction id")
        return cls(format_id, parts[0], bqual)


XaVerb = Literal["start", "end", "prepare", "commit", "rollback"]


class XaStatement(NamedTuple):
    """An ``XA …`` statement of the binlog."""

    verb: XaVerb
    xid: Xid
    one_phase: bool


def xa_statement(text: str) -> XaStatement | None:
    """The XA statement ``text`` is (None: it is none, or names no xid binlake can read)."""
    stripped = text.lstrip()
    if stripped[:2].upper() != "XA":
        return None
    match = _STATEMENT.match(stripped)
    if match is None:
        return None
    verb = match.group("verb").lower()
    try:
        xid = Xid.parse(match.group("xid"))
    except ValueError:
        return None
    kind: XaVerb = "start" if verb == "begin" else verb  # type: ignore[assignment]
    return XaStatement(kind, xid, match.group("one_phase") is not None)


class PreparedXa(NamedTuple):
    """Where an XA transaction was prepared: its event group is (start, end] of the binlog."""

    xid: Xid
    start: BinlogOffset
    """A transaction boundary just before the group (a reader may start there)."""
    end: BinlogOffset
    """The end of its ``XA_PREPARE`` event."""


#: Scans (start, end] of the binlog for prepared XA groups.
PrepareScan = Callable[[BinlogOffset, BinlogOffset], Iterable[PreparedXa]]


class XaLocator:
    """Finds the prepare of an XA transaction committed at a given position.

    ``known`` prepares (the stream's planning side hands a segment those it scanned) answer first;
    otherwise the binlog is scanned backwards, file by file, from the commit — only event headers,
    at transport speed — and what a scan finds is kept, so a region is scanned once per process.

    Args:
        scan: scans a range for prepared groups (``scan.prepared_transactions``).
        files: the server's binlog files and their sizes, oldest first (``SHOW BINARY LOGS``).
        known: prepares already known (from the planning side's scan).
    """

    def __init__(
        self,
        scan: PrepareScan,
        files: Callable[[], list[tuple[str, int]]],
        known: Iterable[PreparedXa] = (),
    ) -> None:
        self._scan = scan
        self._files = files
        self._found: dict[Xid, list[PreparedXa]] = {}
        self._scanned: dict[str, int] = {}
        """File → the position up to which it was scanned (from its start)."""
        self._lock = threading.Lock()
        self.add(known)

    def add(self, known: Iterable[PreparedXa]) -> None:
        """Prepares known from elsewhere (the stream's planning side scanned them)."""
        with self._lock:
            for prepared in known:
                self._remember(prepared)

    def _remember(self, prepared: PreparedXa) -> None:
        seen = self._found.setdefault(prepared.xid, [])
        if prepared not in seen:
            seen.append(prepared)

    def _latest(self, xid: Xid, before: BinlogOffset) -> PreparedXa | None:
        candidates = [p for p in self._found.get(xid, []) if p.end <= before]
        return max(candidates, key=lambda p: p.end) if candidates else None

    def find(self, xid: Xid, before: BinlogOffset) -> PreparedXa:
        """The last prepare of ``xid`` before ``before`` (its commit).

        An xid may be used again after its commit, so the last prepare before the commit is the one
        it decides.

        Raises:
            XaError: no binlog file the server still has holds the prepare.
        """
        with self._lock:
            found = self._latest(xid, before)
            if found is not None:
                return found
            sizes = [(f, size) for f, size in self._files() if BinlogOffset(f, 0) <= before]
            for file, size in reversed(sizes):
                self._scan_file(file, before.pos if file == before.file else size)
                found = self._latest(xid, before)
                if found is not None:
                    return found
            files = [f for f, _ in sizes]
        raise XaError(
            f"The binlog holds `XA COMMIT {xid}` at {before}, but not the `XA PREPARE` that wrote its "
            "rows: it is in a binlog file the server no longer has (files now: "
            f"{', '.join(files) or 'none'}), "
            "so binlake cannot know which rows that transaction changed. Fix: re-read the tables "
            "(`binlake backfill` of every table, or `binlake plan --replan` then `binlake snapshot`), "
            "and keep binlogs longer than XA transactions stay prepared (`binlog_expire_logs_seconds`)."
        )

    def _scan_file(self, file: str, until: int) -> None:
        done = self._scanned.get(file, 4)
        if done >= until:
            return
        log.info("looking for XA prepares in %s between %d and %d", file, done, until)
        for prepared in self._scan(BinlogOffset(file, done), BinlogOffset(file, until)):
            self._remember(prepared)
        self._scanned[file] = until


_LOCATORS: dict[tuple[str, int], XaLocator] = {}
_LOCATORS_LOCK = threading.Lock()


def shared_locator(host: str, port: int, make: Callable[[], XaLocator]) -> XaLocator:
    """The process's locator for one server (what one scan found serves every reader after it)."""
    with _LOCATORS_LOCK:
        locator = _LOCATORS.get((host, port))
        if locator is None:
            locator = _LOCATORS[(host, port)] = make()
        return locator
