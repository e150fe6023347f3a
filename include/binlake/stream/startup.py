"""Where a stream starts: resumed, or by ``source.startup_mode`` (Flink CDC's modes).

- a stream that has run before resumes where the state store says every table is applied
  (a Spark checkpoint, when there is one, takes precedence inside Spark; both are safe because
  each table skips changes it already holds);
- ``initial``: after the snapshot, at its switch offset (the smallest high watermark);
- ``latest-offset``: the source's current position: only changes from now on;
- ``earliest-offset``: the start of the oldest binlog file the server has;
- ``specific-offset``: a file and position, or after the last transaction of a GTID set;
- ``timestamp``: the first transaction whose events are at or after the time.

A start the server no longer has (purged binlog) stops with a message that names the offset, the
oldest one there, and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from pyiceberg.catalog import Catalog

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset, GtidError, gtid_matcher
from binlake.source.binlog.scan import Boundary, purged_error, transactions
from binlake.source.server.facts import ServerFacts
from binlake.state.offset_names import STREAM, SWITCH
from binlake.state.store import StateStore

FIRST_EVENT = 4


class StartupError(BinlakeError):
    """The stream cannot start where its configuration says."""


@dataclass(frozen=True)
class Start:
    offset: BinlogOffset
    reason: str
    """How the offset was chosen, for the log (``resumed``, ``initial``, …)."""


def resolve_start(
    config: PipelineConfig, store: StateStore, catalog: Catalog, server_id: int, server: ServerFacts
) -> Start:
    """The stream's start offset (see the module docstring), checked against the server's binlog
    (``server``: the source as the start-up found it; ``catalog``: whose sink tables a failover
    re-anchors).

    Raises:
        StartupError: the mode needs something that is missing (a finished snapshot, a GTID in
            the binlog).
        BinlogPurgedError: the server no longer has the start offset.
    """
    name = config.pipeline.name
    resumed = store.offsets(name).load(STREAM)
    if resumed is not None:
        from binlake.stream.failover import check_binlog  # the stream's own module, not the CLI's

        anchored = check_binlog(config, store, catalog, resumed, server_id, server)
        reason = "resumed" if anchored == resumed else f"resumed by GTID {resumed.gtid} on a new binlog"
        start = Start(anchored, reason)
    else:
        start = _by_mode(config, store, server_id, server)
    check_available(start.offset, server.binary_logs)
    return start


def check_available(offset: BinlogOffset, binary_logs: list[tuple[str, int]]) -> None:
    """Raise ``BinlogPurgedError`` when the server's binlog files (and sizes) no longer hold
    ``offset``."""
    files = dict(binary_logs)
    if offset.file not in files:
        oldest = min(files, key=lambda f: BinlogOffset(f, 0)) if files else None
        newest = max(files, key=lambda f: BinlogOffset(f, 0)) if files else None
        if oldest is not None and newest is not None and offset > BinlogOffset(newest, files[newest]):
            raise StartupError(
                f"Cannot start the stream at {offset}: the server's binlog ends at {newest}:{files[newest]}, "
                "before it. Is this the server the pipeline was set up on? Fix: point `source` at it, or "
                "start anew with `binlake plan --replan` and `binlake snapshot`."
            )
        raise purged_error(offset, oldest, f"`{offset.file}` is not among its binlog files")
    if offset.pos > files[offset.file]:
        raise StartupError(
            f"Cannot start the stream at {offset}: `{offset.file}` holds only {files[offset.file]} bytes. "
            "Fix: give a position inside the file (a transaction boundary)."
        )


def _by_mode(config: PipelineConfig, store: StateStore, server_id: int, server: ServerFacts) -> Start:
    source = config.source
    mode = source.startup_mode
    if mode == "initial":
        switch = store.offsets(config.pipeline.name).load(SWITCH)
        if switch is None:
            raise StartupError(
                f"Cannot start the stream of `{config.pipeline.name}` with `startup_mode: initial`: its "
                "snapshot has not finished (there is no switch offset). Fix: run `binlake plan` and "
                "`binlake snapshot` first."
            )
        return Start(switch, "after the snapshot (initial)")
    if mode == "snapshot":
        raise StartupError(
            "`startup_mode: snapshot` reads the tables once and streams nothing. Fix: use `initial` "
            "(snapshot, then stream) or another mode to stream."
        )
    head, files = server.head, server.files
    if mode == "latest-offset":
        return Start(BinlogOffset(head.file, head.pos), "latest-offset")
    if mode == "earliest-offset":
        return Start(BinlogOffset(files[0], FIRST_EVENT), "earliest-offset")
    if mode == "specific-offset":
        wanted = source.startup_offset
        assert wanted is not None  # the config requires it for this mode
        if wanted.file is not None and wanted.pos is not None:
            return Start(BinlogOffset(wanted.file, wanted.pos), "specific-offset")
        assert wanted.gtid is not None
        return Start(_after_gtid(config, server_id, files, wanted.gtid), f"after GTID {wanted.gtid}")
    assert mode == "timestamp"
    assert source.startup_timestamp_ms is not None
    return Start(_at_time(config, server_id, files, source.startup_timestamp_ms), "timestamp")


def _after_gtid(config: PipelineConfig, server_id: int, files: list[str], gtid: str) -> BinlogOffset:
    """The end of the last transaction (in binlog order) whose GTID the set contains."""
    try:
        contains = gtid_matcher(gtid)
    except GtidError as e:
        raise StartupError(str(e)) from None
    found: BinlogOffset | None = None
    for boundary in transactions(config.source, server_id, BinlogOffset(files[0], FIRST_EVENT)):
        if boundary.gtid is not None and contains(boundary.gtid):
            found = boundary.offset
    if found is None:
        raise StartupError(
            f"Cannot start the stream after GTID `{gtid}`: no transaction of it is in the server's binlog "
            f"(files {files[0]} to {files[-1]}): it was purged, or not written yet. Fix: start from a "
            "file and position, or with `startup_mode: initial`."
        )
    return found


def _at_time(config: PipelineConfig, server_id: int, files: list[str], timestamp_ms: int) -> BinlogOffset:
    """The boundary before the first transaction at or after ``timestamp_ms``."""
    wanted = math.ceil(timestamp_ms / 1000)  # event times are whole seconds
    first = 0
    for i in range(len(files) - 1, -1, -1):  # the newest file that starts before the time
        boundary = _first(transactions(config.source, server_id, BinlogOffset(files[i], FIRST_EVENT)))
        if boundary is not None and boundary.timestamp < wanted:
            first = i
            break
    previous = BinlogOffset(files[first], FIRST_EVENT)
    for boundary in transactions(config.source, server_id, previous):
        if boundary.timestamp >= wanted:
            return previous
        previous = boundary.offset
    return previous  # nothing that late yet: start at the end, like latest-offset


def _first(boundaries: Iterable[Boundary]) -> Boundary | None:
    iterator = iter(boundaries)
    try:
        return next(iterator)
    except StopIteration:
        return None
    finally:
        close = getattr(iterator, "close", None)
        if close is not None:
            close()
