"""The stream when its source's binlog is not the one it read: a failover, or ``RESET MASTER``.

Binlog positions belong to the binlog that holds them. After a failover to a replica (its own
files and positions) or a ``RESET MASTER`` (files start again at ``.000001``), the stream's stored
position points at unrelated events — resuming there would skip or repeat changes without a word.
So, with every batch, the stream stores the GTID set up to its offset and, per binlog file, the
identity of the binlog (``BinlogAnchor``: the server and the file's creation time), and checks it
before it resumes (``check_binlog``):

- the same binlog: resume by position, as always;
- another binlog, and the stored offset has a GTID set the new binlog holds: resume at the first
  transaction after that set (``source.gtid_positions.position_after``). Everything the stream
  stored in the old binlog's positions is re-anchored to the new one — each sink table's offset
  (and a changelog's or history's binlog epoch: the positions it stores go on above the old ones),
  the schema history (each table's current schema, from the new position on), a new Spark
  checkpoint lineage — and backfills staged in old positions go stale (a rerun reads them anew);
- otherwise the stream stops and says why, with the fix.

Re-anchoring needs the sink to be at one point of the old binlog: a table whose commit got ahead
of the stream's record (a crash between the two) would have some changes applied again — harmless
by key, not for a table without a primary key, which is then refused; so is a stream still inside
its snapshot's window (chunk watermarks are old positions too) or holding a table under a repair.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from pyiceberg.catalog import Catalog

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import CreateTable
from binlake.offsets import BinlogOffset
from binlake.schema.iceberg_types import identifier_columns
from binlake.schema.table_rules import table_rules
from binlake.sink.exactly_once import STREAM_OFFSET_KEY
from binlake.sink.history.changelog import POSITION_EPOCH
from binlake.sink.writer import IcebergWriter
from binlake.source.binlog.gtid_positions import (
    BinlogIdentity,
    GtidPositionError,
    GtidTracker,
    binlog_identity,
    position_after,
)
from binlake.source.server.facts import ServerFacts
from binlake.state.reanchoring import held_in_old_positions, move_to, snapshot_applies
from binlake.state.store import StateStore

log = logging.getLogger(__name__)

#: The state store note with the identity of the binlog the stream's offset belongs to.
NOTE = "stream.binlog"


class BinlogChangedError(BinlakeError):
    """The source's binlog is not the one the stream read, and the stream cannot resume on it."""


class BinlogAnchor:
    """What the stream stores with each offset so that it survives a change of binlog."""

    def __init__(self, config: PipelineConfig, store: StateStore, server_id: int, flavor: str) -> None:
        self.config = config
        self.store = store
        self.server_id = server_id
        self.tracker = GtidTracker(config.source, server_id, flavor)
        note = store.offsets(config.pipeline.name).load_note(NOTE)
        self._file = None if note is None else str(note.get("file"))

    def __call__(self, end: BinlogOffset) -> BinlogOffset:
        """``end`` with the GTID set up to it; the binlog's identity noted for a new file."""
        if end.file != self._file:
            identity = binlog_identity(self.config.source, self.server_id, end.file)
            if identity is not None:
                self.store.offsets(self.config.pipeline.name).save_note(NOTE, identity.to_dict())
                self._file = end.file
        return BinlogOffset(end.file, end.pos, self.tracker.gtid_at(end))


def check_binlog(
    config: PipelineConfig,
    store: StateStore,
    catalog: Catalog,
    offset: BinlogOffset,
    server_id: int,
    server: ServerFacts,
) -> BinlogOffset:
    """The offset to resume from: ``offset`` on the same binlog, or its GTID set's end on a new one
    (``server``: the source as the start-up found it).

    Raises:
        BinlogChangedError: the binlog changed and the stream cannot follow (see the module docstring).
    """
    name = config.pipeline.name
    note = store.offsets(name).load_note(NOTE)
    if note is None or str(note.get("file")) != offset.file:
        return offset  # nothing recorded for this offset's file (a state store of an older binlake)
    recorded = BinlogIdentity.from_dict(note)
    now = binlog_identity(config.source, server_id, offset.file, server.server)
    current_server = server.server
    purged = now is None and current_server == recorded.server and _purged(server.files, offset)
    if now == recorded:
        return offset
    if purged:
        return offset  # the same binlog, only purged past the offset: ``check_available`` says so
    what = (
        f"the source is now another server ({current_server}, was {recorded.server})"
        if current_server != recorded.server
        else f"the source's binlog was reset (`{offset.file}` is not the file the stream read)"
    )
    if offset.gtid is None:
        raise BinlogChangedError(
            f"Cannot resume the stream at {offset}: {what}, and positions of the old binlog mean nothing "
            "in the new one; without a GTID for that offset binlake cannot tell where to go on. Fix: turn "
            "GTIDs on (MySQL `gtid_mode = ON` and `enforce_gtid_consistency = ON`; MariaDB writes them "
            "always) and start anew: `binlake plan --replan`, then `binlake snapshot`."
        )
    try:
        new = position_after(config.source, server_id, offset.gtid, server.version.flavor, server.head)
    except GtidPositionError as e:
        raise BinlogChangedError(
            f"Cannot resume the stream at {offset} (GTID `{offset.gtid}`): {what}, and {e}. Fix: point the "
            "pipeline at a server that holds those transactions, or start anew: `binlake plan --replan`, "
            "then `binlake snapshot`."
        ) from None
    reanchor(config, store, catalog, offset, new, what, server.tables)
    return new


def _purged(files: list[str], offset: BinlogOffset) -> bool:
    """Whether the server's binlog has moved on past ``offset``'s file (as purging leaves it)."""
    return any(BinlogOffset(f, 0).sequence > offset.sequence for f in files)


def reanchor(
    config: PipelineConfig,
    store: StateStore,
    catalog: Catalog,
    old: BinlogOffset,
    new: BinlogOffset,
    why: str,
    tables: Iterable[CreateTable],
) -> None:
    """Move everything the stream stored in the old binlog's positions to ``new`` (``tables``: the
    captured tables, whose sink tables hold offsets)."""
    name = config.pipeline.name
    writers = _sink_tables(config, catalog, tables)
    problems = [
        f"`{w.identifier}` ({why_not}) holds changes past {old}, which would be applied twice"
        for w, why_not in writers.items()
        if why_not and (done := w.stream_offset()) is not None and done > old
    ]
    problems += held_in_old_positions(store, name, old, snapshot_applies(config, store))
    if problems:
        raise BinlogChangedError(
            f"Cannot resume the stream at {old} on the new binlog ({why}): " + "; ".join(problems) + ". Fix: "
            "start anew: `binlake plan --replan`, then `binlake snapshot`."
        )
    for writer, why_not in writers.items():  # changelogs and histories: offsets are positions too
        moved = {STREAM_OFFSET_KEY: _offset_json(new)}
        if why_not == APPENDS:  # the positions it stores from here on: above every earlier one
            moved[POSITION_EPOCH] = str(int(writer.table.properties.get(POSITION_EPOCH, "0")) + 1)
        with writer.table.transaction() as tx:
            tx.set_properties(moved)
    move_to(store, name, new, why)
    log.warning("%s: the stream resumes at %s, after GTID %s (it was at %s)", why, new, old.gtid, old)


def _sink_tables(
    config: PipelineConfig, catalog: Catalog, tables: Iterable[CreateTable]
) -> dict[IcebergWriter, str]:
    """The writers of every sink table the captured tables keep, each with why a change it applied
    twice would not be the same as once (empty: an upsert table with a key merges it again alike)."""
    seen: dict[str, tuple[IcebergWriter, str]] = {}
    for schema in tables:
        rules = table_rules(config, schema.table)
        for identifier in rules.kept_names:
            if identifier in seen or not catalog.table_exists(identifier):
                continue
            writer = IcebergWriter(catalog, identifier)
            upsert = rules.upsert and identifier == rules.sink_name
            why = "" if upsert and identifier_columns(writer.table.schema()) else "no primary key"
            seen[identifier] = writer, why if upsert else APPENDS
    return dict(seen.values())


#: Why a changelog or history cannot take a change twice.
APPENDS = "a changelog or history: it appends"


def _offset_json(offset: BinlogOffset) -> str:
    import json

    return json.dumps(offset.to_dict())
