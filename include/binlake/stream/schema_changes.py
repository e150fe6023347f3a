"""The schema-change protocol (seed 000): the stream meets a DDL → flush → request → apply → resume.

The stream's planning side (the binlog source's ``latestOffset``) sees every standalone statement
of the range it plans (a header-only scan). For one that changes a captured table, or creates a
table the include regexes match:

1. **flush**: the micro-batch ends at the boundary before the statement, so every earlier change
   is committed with the old schema first (Flink CDC's FlushEvent; the batch boundary is the flush);
2. **request**: the new source schema goes into the schema history at the statement's position,
   and each change is recorded as pending in the state store (position, change, behaviour) — both
   idempotent, so a replay after a crash finds them;
3. **apply**: ``inline`` (the stream applies it through the metadata applier) or ``external``
   (the stream waits until something else — Airflow's DDL DAG — marks it applied, ignored or
   failed; after ``stream.schema_change_timeout_s`` the stream fails, naming the change);
4. **resume**: the next batch starts at the statement and decodes with the new schema.

Other tables wait while one table's change is applied: a micro-batch is one binlog range for all
tables, and per-table ranges would need per-table offsets, which Spark's single offset cannot hold.
Inline application takes well under a second, so the wait is short.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from binlake.config import PipelineConfig
from binlake.events import (
    AddColumn,
    AlterColumnType,
    CreateTable,
    DropTable,
    RenameColumn,
    RenameTable,
    SchemaChange,
    TableId,
    TruncateTable,
    describe_change,
)
from binlake.faults import crash_point
from binlake.schema.behaviors import SchemaChangeRefusedError, loosened, sink_changes
from binlake.schema.table_rules import table_rules
from binlake.state.store import SchemaChangeRequest, SchemaChangeStatus, StateStore
from binlake.stream.schema_tracker import Ddl, SchemaChangeFailedError, SchemaTracker
from binlake.stream.server_filled import meet_server_filled

if TYPE_CHECKING:
    from binlake.sink.history.state_applier import StateTableApplier
    from binlake.sink.metadata_applier import IcebergMetadataApplier

    #: The upsert table's applier, or a state table's where a table keeps no upsert table.
    Applier = IcebergMetadataApplier | StateTableApplier

log = logging.getLogger(__name__)


class SchemaChangeProtocol:
    """Runs the protocol for the stream's planning side (see the module docstring)."""

    def __init__(
        self, config: PipelineConfig, store: StateStore, sleep: Callable[[float], None] = time.sleep
    ):
        self.config = config
        self.store = store
        self.tracker = SchemaTracker(config, store)
        self.sleep = sleep

    def handle(self, ddl: Ddl) -> None:
        """Request, apply (or wait for) and record every change of ``ddl``; raise if one failed."""
        pipeline, behavior = self.config.pipeline.name, self.config.pipeline.schema_change_behavior
        self._server_filled(ddl)
        self.tracker.record(ddl)
        requests = [
            self.store.schema_requests(pipeline).request(ddl.offset, seq, change, behavior)
            for seq, change in enumerate(ddl.changes)
        ]
        crash_point("schema-before-apply")
        for request in requests:
            if request.status == "pending":
                if self.config.stream.schema_change_applier == "inline":
                    apply_request(self.config, self.store, request)
                    crash_point("schema-after-apply")
                else:
                    log.info(
                        "waiting for the schema change %s to be applied", describe_change(request.change)
                    )
            final = self._wait(request)
            if final.status == "failed":
                raise SchemaChangeFailedError(
                    f"The schema change at {final.offset} ({describe_change(final.change)}) failed: "
                    f"{final.message}"
                )

    def _server_filled(self, ddl: Ddl) -> None:
        """Rows the statement changed (or, renamed into the captured tables, brought) that only the
        server knows: a gap of the table at the statement (``stream/server_filled.py``), before
        anything of it is recorded."""
        behavior = self.config.pipeline.schema_change_behavior
        if behavior == "ignore":
            return  # neither a column nor a new table reaches the sink
        # `exception` stops at the statement's changes, but takes a new table
        changes = () if behavior == "exception" else ddl.changes
        meet_server_filled(self.config, self.store, changes, ddl.offset, ddl.strict, ddl.brought)

    def _wait(self, request: SchemaChangeRequest) -> SchemaChangeRequest:
        deadline = time.monotonic() + self.config.stream.schema_change_timeout_s
        while True:
            found = self.store.schema_requests(self.config.pipeline.name).get(request.offset, request.seq)
            if found is not None and found.status != "pending":
                return found
            if time.monotonic() > deadline:
                raise SchemaChangeFailedError(
                    f"The schema change at {request.offset} ({describe_change(request.change)}) is still "
                    f"pending after {self.config.stream.schema_change_timeout_s:g} s "
                    "(`stream.schema_change_timeout_s`): nothing applied it. Fix: start the pipeline's "
                    "DDL DAG in Airflow (`binlake__<name>__ddl`), or set "
                    "`stream.schema_change_applier: inline`."
                )
            self.sleep(1.0)


def _renamed_back(store: StateStore, pipeline: str, request: SchemaChangeRequest, name: TableId) -> bool:
    """Whether the same statement renames ``name`` on into the captured tables (a swap through a
    temporary name: ``RENAME TABLE a TO tmp, b TO a, tmp TO b``)."""
    seq = request.seq + 1
    while (later := store.schema_requests(pipeline).get(request.offset, seq)) is not None:
        if isinstance(later.change, RenameTable) and later.change.table == name:
            return True
        seq += 1
    return False


def _through_transform(
    config: PipelineConfig, store: StateStore, request: SchemaChangeRequest, after: CreateTable | None
) -> list[SchemaChange] | None:
    """The sink changes of a transformed table's change (``schema.transforms``); None: not transformed."""
    # Imported here: the planning side imports this module (see schema_tracker.SchemaTracker.ddl).
    from binlake.schema.transform_sql import TransformError
    from binlake.schema.transforms import sink_changes_through, transform_of

    change = request.change
    rules = table_rules(config, change.table)
    if isinstance(change, CreateTable):
        transform = transform_of(rules, change)
        return [transform.sink] if transform is not None else None
    if isinstance(change, RenameTable):
        old, new = rules.transform, table_rules(config, change.new_table).transform
        if old != new:  # the sink table holds one rule's projection; the other's rows would not fit
            raise TransformError(
                f"{change.table} is renamed to {change.new_table}, and the two names fall under different "
                "`transform` rules (or one under none), so the sink table's columns would not be the "
                f"renamed table's. Fix: give both names the same rule, then backfill {change.new_table} "
                f"(`binlake backfill --table {change.new_table}`)."
            )
        return None
    if rules.transform is None:
        return None
    version = store.schema_history(config.pipeline.name).before(change.table, request.offset)
    before = version.schema if version is not None else None
    if before is None:
        return None
    transform = transform_of(rules, before)
    return sink_changes_through(transform, change, after) if transform is not None else None


def _log_removals(
    config: PipelineConfig, applier: Applier, table: TableId, request: SchemaChangeRequest, source: str | None
) -> None:
    """The rows a TRUNCATE or DROP of ``table`` removes (``source``'s alone, on a table routed
    sources share): ``-D`` in its changelog, their versions closed in its history, if it keeps them."""
    from binlake.sink.history.companions import companion_writers
    from binlake.sink.history.state_table import state_table

    rules = table_rules(config, table)
    state = state_table(rules, applier.catalog)
    if state is None:
        return
    for writer in companion_writers(rules, applier.catalog, state):
        removed = writer.remove_all(state, request.offset, change_id(request), removal_time(request), source)
        what = describe_change(request.change)
        log.info("%s: %d rows removed by %s, in %s", table, removed, what, writer.identifier)


def _log_fill(
    config: PipelineConfig, applier: Applier, change: AddColumn, request: SchemaChangeRequest
) -> None:
    """The rows an ``ADD COLUMN`` gives a value (``sink/column_fill.py``): a ``-U``/``+U`` of each
    in the table's changelog, a new version of each in its history, if it keeps them. Before the
    sink table's own fill, each once: a replay after the sink table has the column finds them made."""
    from binlake.schema.iceberg_types import iceberg_type
    from binlake.sink.column_fill import existing_rows_scalar, fill_pending
    from binlake.sink.history.changelog import ColumnFill
    from binlake.sink.history.companions import companion_writers
    from binlake.sink.history.state_table import state_table

    value = existing_rows_scalar(change)
    rules = table_rules(config, change.table)
    state = state_table(rules, applier.catalog)
    if value is None or state is None:
        return
    if rules.upsert and not fill_pending(state.table, change.column.name, change_id(request)):
        return  # filled already: its changelog and history rows were made before
    fill = ColumnFill(
        change.column.name, iceberg_type(change.column), value, change.table.name, request.offset,
        request.seq, change_id(request), change.statement_time or int(request.requested_at.timestamp()),
    )  # fmt: skip
    after_only = rules.changelog is not None and rules.changelog.changelog_updates == "after"
    writers = companion_writers(rules, applier.catalog, state)  # each records its fill: once
    for writer in writers:
        filled = writer.fill_all(state, fill, after_only)
        log.info("%s: %d rows given `%s` by %s, in %s", change.table, filled, fill.column,
                 describe_change(change), writer.identifier)  # fmt: skip
    if writers:
        crash_point("schema-after-companion-fill")


def _rename_in_companions(config: PipelineConfig, applier: Applier, change: RenameColumn) -> None:
    """A column the sink table renamed is renamed in its changelog and history too: their rows keep
    their values under the new name, as the sink table's do (Iceberg renames by field id). After
    the sink table's rename, and a no-op once made (a replay)."""
    catalog = applier.catalog
    for identifier in table_rules(config, change.table).companion_names:
        if not catalog.table_exists(identifier):
            continue
        table = catalog.load_table(identifier)
        names = table.schema().column_names
        if change.old_name in names and change.new_name not in names:
            with table.update_schema() as update:
                update.rename_column(change.old_name, change.new_name)
            log.info("%s: column %s renamed to %s", identifier, change.old_name, change.new_name)


def _companions_follow(config: PipelineConfig, applier: Applier, change: RenameTable, aside: str) -> None:
    """A renamed table's changelog and history take the new name with its sink table; one the new
    name keeps and the old did not starts from the table's rows."""
    from binlake.sink.history.companions import companion_writers, mark_renamed, rename_companions
    from binlake.sink.history.state_table import state_table

    catalog = applier.catalog
    old, new = table_rules(config, change.table), table_rules(config, change.new_table)
    for moved in rename_companions(old, new, catalog, aside):
        log.info("%s renamed to %s: %s", change.table, change.new_table, moved)
    state = state_table(new, catalog)
    if state is not None:
        for writer in companion_writers(new, catalog, state):
            writer.seed(state)  # nothing for one renamed with the table (a stream wrote it)
            mark_renamed(catalog, writer.identifier, aside)


def _set_aside(applier: Applier, change: RenameTable, request: SchemaChangeRequest) -> None:
    """A table renamed onto a name whose sink table is still there (``lenient`` kept it from the
    source's DROP): that one goes aside, to its name + ``_aside_suffix`` (nothing is lost), and the
    renamed table takes the name, as on the source."""
    catalog = applier.catalog
    old, new = applier.identifier(change.table), applier.identifier(change.new_table)
    from binlake.sink.metadata_applier import IcebergMetadataApplier

    if not isinstance(applier, IcebergMetadataApplier):
        return  # a state table that is a changelog or history goes aside with them (``rename_companions``)
    if catalog.table_exists(old) and catalog.table_exists(new):
        aside = new + _aside_suffix(request)
        catalog.rename_table(new, aside)
        log.warning("%s: the sink table kept there goes aside to %s", change.new_table, aside)


def _aside_suffix(request: SchemaChangeRequest) -> str:
    """What a sink table a rename replaces is renamed with (where the statement was)."""
    return f"__before_{request.offset.file.rsplit('.', 1)[-1]}_{request.offset.pos}"


def _applier(config: PipelineConfig, table: TableId) -> Applier:
    """The applier of ``table``'s changes: its upsert table's, or its state table's without one."""
    from binlake.sink.catalog import open_catalog, sink_identifier
    from binlake.sink.history.state_applier import StateTableApplier
    from binlake.sink.layout import layouts
    from binlake.sink.metadata_applier import IcebergMetadataApplier

    catalog = open_catalog(config)
    if table_rules(config, table).upsert:
        return IcebergMetadataApplier(catalog, lambda t: sink_identifier(config, t), layouts(config))
    return StateTableApplier(catalog, lambda t: table_rules(config, t), layouts(config))


def _kept_alike(config: PipelineConfig, change: SchemaChange) -> None:
    """A table renamed between names of which one keeps an upsert table and the other not is
    refused: its current rows would have no table to move to; so is a table without a primary key
    created where a history would hold its rows (versions of equal rows cannot be told apart)."""
    if isinstance(change, CreateTable) and not change.primary_key:
        rules = table_rules(config, change.table)
        if rules.state_kind == "history":
            raise SchemaChangeRefusedError(
                f"{change.table} is created without a primary key, and its `sink.modes` rule keeps its rows "
                "in a history (no upsert table), whose versions of equal rows could not be told apart. Fix: "
                "give the table a primary key, or a rule with `upsert` or `changelog` alone for it, then "
                f"backfill {change.table}"
            )
    if not isinstance(change, RenameTable):
        return
    old, new = table_rules(config, change.table), table_rules(config, change.new_table)
    if old.upsert != new.upsert:
        raise SchemaChangeRefusedError(
            f"{change.table} is renamed to {change.new_table}, and the `sink.modes` rule of one name keeps "
            "an upsert table and the other's does not, so the table's current rows would have no table to "
            f"move to. Fix: give both names rules alike, then backfill {change.new_table} "
            f"(`binlake backfill --table {change.new_table}`)"
        )


def change_id(request: SchemaChangeRequest) -> str:
    """The id a sink records with the change it made for ``request`` (a replay finds it there)."""
    return f"{request.offset}#{request.seq}"


def removal_time(request: SchemaChangeRequest) -> int:
    """When a TRUNCATE's or DROP's rows left the source: the statement's time (requests recorded
    by an older binlake: when the stream met it)."""
    change = request.change
    if isinstance(change, TruncateTable | DropTable) and change.statement_time is not None:
        return change.statement_time
    return int(request.requested_at.timestamp())


def apply_request(config: PipelineConfig, store: StateStore, request: SchemaChangeRequest) -> str:
    """The DDL-apply step: make ``request``'s change in the sink under its behaviour, record the outcome.

    Inline, the stream calls this itself; Airflow's DDL task calls it for the external applier.
    Idempotent: every sink change is a no-op when already made.

    Returns:
        The status recorded: ``applied``, ``ignored`` or ``failed``.
    """
    from binlake.schema.transform_sql import TransformError
    from binlake.sink.history.soft_delete import truncate_marking
    from binlake.sink.metadata_applier import UnsupportedSchemaChangeError  # see SchemaTracker.ddl

    pipeline = config.pipeline.name
    change = request.change
    applier = _applier(config, change.table)
    shared = table_rules(config, change.table).routed
    target = change.new_table if isinstance(change, RenameTable) else change.table
    selector = SchemaTracker(config, store).selector
    if (
        isinstance(change, RenameTable)
        and not selector.matches(target)
        and not _renamed_back(store, pipeline, request, target)
    ):
        reason = f"renamed out of `source.tables`: {change.table} is no longer captured; its sink table stays"
        store.schema_requests(pipeline).finish(request.offset, request.seq, "ignored", reason)
        log.warning("schema change %s at %s: %s", describe_change(change), request.offset, reason)
        return "ignored"
    behavior = request.behavior
    if isinstance(change, DropTable) and selector.shadow_of(change.table) is not None:
        behavior = "evolve"  # a schema-change tool's leftover: its sink table goes too
    version = store.schema_history(pipeline).at(target, request.offset)
    safe = isinstance(change, AlterColumnType) and applier.can_alter(change)
    try:
        _kept_alike(config, change)
        planned = _through_transform(config, store, request, version.schema if version else None)
        if planned is None:
            planned = sink_changes(change, behavior, safe, version.schema if version else None, shared)
    except (SchemaChangeRefusedError, TransformError) as e:
        store.schema_requests(pipeline).finish(request.offset, request.seq, "failed", str(e))
        return "failed"
    if not planned:
        reason = f"behaviour `{request.behavior}` leaves the sink as it is"
        store.schema_requests(pipeline).finish(request.offset, request.seq, "ignored", reason)
        log.info("schema change %s at %s: %s", describe_change(change), request.offset, reason)
        return "ignored"
    try:
        for step in planned:
            # a routed source's creation never replaces the table the other sources share
            step_id = None if shared and isinstance(step, CreateTable) else change_id(request)
            source = step.table.name if shared else None  # the rows of a shared table it removes
            replacing = isinstance(step, CreateTable) and applier.replaces(step, step_id)
            if isinstance(step, (TruncateTable, DropTable)) or replacing:
                # a table created again (lenient kept the dropped one): its old rows leave too
                _log_removals(config, applier, step.table, request, source)
            if isinstance(step, AddColumn):
                _log_fill(config, applier, step, request)
            if isinstance(step, TruncateTable) and table_rules(config, step.table).soft_delete:
                # The rows stay, marked deleted by the TRUNCATE (sink/history/soft_delete.py).
                table = applier.catalog.load_table(applier.identifier(step.table))
                at, when, made = request.offset, removal_time(request), change_id(request)
                marked = truncate_marking(table, when, at, made, source)
                log.info("%s: %d rows marked deleted by its truncate", step.table, marked)
                continue
            if isinstance(step, RenameTable):
                _set_aside(applier, step, request)
            applier.apply(step, step_id)
            if isinstance(step, RenameColumn):
                _rename_in_companions(config, applier, step)
            if isinstance(step, RenameTable):
                crash_point("schema-before-companion-rename")
                _companions_follow(config, applier, step, _aside_suffix(request))
    except UnsupportedSchemaChangeError as e:
        status: SchemaChangeStatus = "ignored" if request.behavior in ("try_evolve", "lenient") else "failed"
        if status == "ignored":  # the stream goes on with the sink's schema: nulls where rows no longer fit
            for step in loosened(e.change):
                applier.apply(step)
        store.schema_requests(pipeline).finish(request.offset, request.seq, status, str(e))
        log.warning("schema change %s at %s: %s (%s)", describe_change(change), request.offset, status, e)
        return status
    done = "; ".join(describe_change(step) for step in planned)
    store.schema_requests(pipeline).finish(request.offset, request.seq, "applied", done)
    log.info("schema change %s at %s applied to the sink: %s", describe_change(change), request.offset, done)
    return "applied"
