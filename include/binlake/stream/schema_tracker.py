"""The source schemas of a pipeline by binlog position, and the statements that change them.

The stream's planning side asks the tracker what a standalone statement changes of the captured
tables (``SchemaTracker.ddl``: parsed against the schemas in force before it, less the tables the
snapshot read after it) and records the schemas after it in the state store's history
(``record``); the schema-change protocol (``stream/schema_changes.py``) then applies the changes
to the sink (docs/architecture.md, "How data flows", ddl-apply).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import CreateTable, RenameTable, SchemaChange, TableId, describe_change
from binlake.offsets import BinlogOffset
from binlake.schema.history import SchemaEvolutionError, evolve, tables_changed
from binlake.snapshot.spans import TableSpan, stream_spans
from binlake.source.binlog.scan import Boundary
from binlake.source.server.charsets import Charsets
from binlake.source.server.connection import connect
from binlake.source.server.discovery import TableSelector, discover, server_charsets
from binlake.state.store import SchemaVersion, StateStore
from binlake.stream.server_filled import clocked

log = logging.getLogger(__name__)

#: The history's cause for versions read from the server when a stream begins.
DISCOVERED = "discovered"


class SchemaChangeFailedError(BinlakeError):
    """A schema change stopped the stream (refused, failed to apply, or not applied in time)."""


@dataclass(frozen=True)
class Ddl:
    """A statement that changes captured tables, where it lies, and what it changes."""

    before: BinlogOffset
    """The boundary before the statement: the flush point."""
    offset: BinlogOffset
    """The boundary after it: where the new schema begins."""
    changes: tuple[SchemaChange, ...]
    strict: bool = True
    """Whether a value that did not fit a column's new type failed the statement (a strict session,
    no ``ALTER IGNORE``) instead of being converted (``schema/type_changes.py``)."""
    brought: tuple[tuple[TableId, str], ...] = ()
    """New tables in ``changes`` that came with rows the stream reads in no row event, and what
    brought them (a rename into ``source.tables``, a ``CREATE TABLE … SELECT``)."""


class SchemaTracker:
    """The source schemas of one pipeline by binlog position (over the state store's history)."""

    def __init__(self, config: PipelineConfig, store: StateStore) -> None:
        self.config = config
        self.store = store
        self.pipeline = config.pipeline.name
        self.selector = TableSelector(config.source.tables, config.source.tables_exclude)
        self._server_charsets: Charsets | None = None
        self._spans: dict[TableId, TableSpan] | None = None

    def bootstrap(self, schemas: list[CreateTable], offset: BinlogOffset) -> None:
        """Record the discovered schema of each captured table the history does not know yet."""
        known = {v.table for v in self.store.schema_history(self.pipeline).versions()}
        for schema in schemas:
            if schema.table not in known:
                self.store.schema_history(self.pipeline).record(schema.table, offset, schema, DISCOVERED)

    def schemas_at(self, offset: BinlogOffset) -> dict[TableId, CreateTable]:
        """The captured tables that exist at ``offset``, with the schema in force there."""
        return {t: v.schema for t, v in self.versions_at(offset).items() if v.schema is not None}

    def versions_at(self, offset: BinlogOffset) -> dict[TableId, SchemaVersion]:
        """The schema version in force at ``offset`` of each captured table that exists there."""
        latest: dict[TableId, SchemaVersion] = {}
        for version in self.store.schema_history(self.pipeline).versions():
            if version.offset <= offset:
                latest[version.table] = version
        return {t: v for t, v in latest.items() if v.schema is not None and self.selector.matches(t)}

    def ddl(self, before: BinlogOffset, boundary: Boundary) -> Ddl | None:
        """The captured-table changes of a standalone statement (None: it changes none of them)."""
        assert boundary.statement is not None
        # Imported here, like the Iceberg side in `apply_request`: Spark's streaming source runner
        # imports this module to plan every query's batches, and the parser (sqlglot) and pyiceberg
        # took a second of that start; they are needed once a statement comes.
        from binlake.schema.type_changes import strict_statement
        from binlake.source.ddl.parser import UnparsedDdlError, parse_ddl

        current = self.schemas_at(before)
        held = self._held_at(boundary.offset)
        try:
            changes = parse_ddl(
                boundary.statement,
                boundary.database,
                lambda t: None if t in held else current.get(t),
                self._charsets(),
                lambda t: self.selector.matches(t) and t not in held,
                lambda database: [t for t in current if t.database == database and t not in held],
            )
        except UnparsedDdlError as e:
            return self._unparsed(boundary, str(e))
        changes = _not_held(changes, held, boundary.offset)
        changes = clocked(self.config.source, changes, boundary)
        relevant: list[SchemaChange] = []
        brought: list[tuple[TableId, str]] = []
        known = set(current)  # the statement's renames run one after another (a → tmp, b → a, tmp → b)
        for change in changes:
            if isinstance(change, RenameTable) and change.table in known:
                known.discard(change.table)
                known.add(change.new_table)
            if any(self.selector.matches(t) for t in tables_changed(change)):
                made = self._renamed_in(change, known, boundary.offset)
                relevant.append(made)
                if made is not change and isinstance(change, RenameTable):
                    brought.append((change.new_table, f"`RENAME TABLE {change.table} TO {change.new_table}`"))
                elif boundary.with_rows and isinstance(made, CreateTable):
                    brought.append((made.table, f"`CREATE TABLE {made.table} … SELECT`"))
        if not relevant:
            return None
        strict = strict_statement(boundary.sql_mode, boundary.statement)
        return Ddl(before, boundary.offset, tuple(relevant), strict, tuple(brought))

    def _held_at(self, at: BinlogOffset) -> set[TableId]:
        """The tables the snapshot read after a statement ending at ``at`` (``snapshot.spans``)."""
        if self._spans is None:
            self._spans = stream_spans(self.config, self.store)
        return {t for t, span in self._spans.items() if span.holds(at)}

    def _charsets(self) -> Charsets:
        """The server's charset defaults, read once per tracker (they change with DDL on databases,
        which is rare; a statement naming its charsets does not need them)."""
        if self._server_charsets is None:
            with contextlib.closing(connect(self.config.source)) as conn:
                self._server_charsets = server_charsets(conn)
        return self._server_charsets

    def _renamed_in(self, change: SchemaChange, known: set[TableId], at: BinlogOffset) -> SchemaChange:
        """A table renamed into the include set from outside it is a new table to the stream."""
        if not isinstance(change, RenameTable) or change.new_table in known:
            return change
        with contextlib.closing(connect(self.config.source)) as conn:
            found = discover(conn, [change.new_table])
        if not found:
            raise SchemaChangeFailedError(
                f"{change.table} was renamed to {change.new_table} at {at}, which `source.tables` "
                f"captures, but {change.new_table} no longer exists on the source to read its schema."
            )
        log.warning(
            "%s was renamed into `source.tables` as %s at %s: it is streamed from there on, and the rows "
            "it held then are a gap of it there (``stream.on_gap``)", change.table, change.new_table, at,
        )  # fmt: skip
        return found[0]

    def _unparsed(self, boundary: Boundary, reason: str) -> Ddl | None:
        # Only table statements reach this point (the parser ignores the rest unread), so naming
        # the statement's start cannot leak a password.
        words = " ".join((boundary.statement or "").split()[:8])
        message = f"A table statement at {boundary.offset} could not be read ({reason}): `{words} …`."
        if self.config.pipeline.schema_change_behavior in ("exception", "evolve"):
            raise SchemaChangeFailedError(
                f"{message} With `pipeline.schema_change_behavior: "
                f"{self.config.pipeline.schema_change_behavior}` the stream stops here. Fix: apply "
                "the change to the Iceberg table by hand and re-snapshot the table, or choose "
                "`lenient` to log such statements and go on."
            )
        log.warning("%s It is not applied; rows of other columns after it stop the stream.", message)
        return None

    def record(self, ddl: Ddl) -> None:
        """Step 2 (history half): the source schemas after ``ddl``, at its position."""
        current = self.schemas_at(ddl.before)
        for change in ddl.changes:
            before = dict(current)
            for table in tables_changed(change):
                # A renamed table's new name starts from the old name's schema.
                renamed = isinstance(change, RenameTable) and table == change.new_table
                try:
                    after = evolve(table, before.get(change.table if renamed else table), change)
                except SchemaEvolutionError as e:
                    raise SchemaChangeFailedError(
                        f"The schema change at {ddl.offset} ({describe_change(change)}) does not fit the "
                        f"schema binlake holds for {table}: {e}. Fix: re-snapshot the table "
                        "(`binlake plan --replan`, `binlake snapshot`)."
                    ) from None
                if after is None:
                    current.pop(table, None)
                else:
                    current[table] = after
                self.store.schema_history(self.pipeline).record(
                    table, ddl.offset, after, describe_change(change)
                )


def _not_held(changes: list[SchemaChange], held: set[TableId], at: BinlogOffset) -> list[SchemaChange]:
    """The changes the snapshot does not hold already: it read every table in ``held`` after the
    statement, with the schema the statement gave it (and the rows it left)."""
    kept = [c for c in changes if not held & set(tables_changed(c))]
    if len(kept) < len(changes):
        tables = sorted({str(t) for c in changes for t in tables_changed(c) if t in held})
        log.info("the statement at %s is older than the snapshot of %s: already there", at, ", ".join(tables))
    return kept
