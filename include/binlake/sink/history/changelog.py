"""The changelog table: every change of a source table as a row, appended exactly once.

A table whose ``sink.modes`` rule lists ``changelog`` (``config/modes.py``) feeds, beside its upsert
table, ``<sink table>_changelog``: the sink table's columns (the after image; the before image for
``-U`` and ``-D``) and these, named as Flink CDC names the kinds of change:

- ``__op__``: ``+I`` (an insert, or a row the snapshot read), ``-U`` / ``+U`` (an update's before
  and after image), ``-D`` (a delete). An update that changes the key is ``-U`` of the old row and
  ``+U`` of the new; a row a transform's filter lets in is ``+I``, one it lets out ``-D``.
- ``__origin__``: ``binlog``, or ``snapshot`` for the rows the initial snapshot read, ``backfill``
  for a backfill's, ``schema`` for the rows an ``ADD COLUMN`` gave a value (``ColumnFill``).
- ``__event_time__``: the binlog event's time (when the statement ran on the source, seconds);
  a snapshot row: its chunk's read time. The table is partitioned by its day.
- ``__position__``: the change's binlog position as one sortable number (file number × 2³² +
  offset, plus the binlog's epoch × 2⁵² once the stream followed a failover: ``POSITION_EPOCH``);
  a snapshot row: its chunk's high watermark. ``__binlog_file__``/``__binlog_pos__``: the server's
  position, for people.
- ``__order__``: the change's order within its event (a statement's rows share its position).
- ``__gtid__``: the GTID of the change's transaction (MariaDB ``domain-server-sequence``, MySQL
  ``uuid:number``; an XA transaction's is its commit's); null for rows the snapshot or a backfill
  read, and where the server writes none.

Sorting by (``__position__``, ``__order__``) replays the source: for each key, ``+I``/``+U`` set the
row and ``-U``/``-D`` remove it (``testing.compare.replay_changelog``).

Exactly once as the upsert table: the batch's end offset goes into the same commit as its rows
(``sink/exactly_once.py``), and a replayed batch appends only what lies past it. Snapshot chunks are
appended with their chunk ids in the snapshot summary, like the upsert table's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import IcebergType

from binlake.offsets import BinlogOffset, packed_files, packed_positions
from binlake.schema.routes import source_mask
from binlake.sink.history.soft_delete import COLUMNS as SOFT_DELETE
from binlake.sink.type_promotions import is_promotion

OP = "__op__"
ORIGIN = "__origin__"
EVENT_TIME = "__event_time__"
POSITION = "__position__"
BINLOG_FILE = "__binlog_file__"
BINLOG_POS = "__binlog_pos__"
ORDER = "__order__"
GTID = "__gtid__"

METADATA = pa.schema(
    [
        (OP, pa.string()),
        (ORIGIN, pa.string()),
        (EVENT_TIME, pa.timestamp("us", "UTC")),
        (POSITION, pa.int64()),
        (BINLOG_FILE, pa.string()),
        (BINLOG_POS, pa.int64()),
        (ORDER, pa.int32()),
        (GTID, pa.string()),
    ]
)
INSERT, BEFORE, AFTER, DELETE = "+I", "-U", "+U", "-D"
#: The table property naming the sink table's key columns (JSON): the key a changelog replays by
#: where it holds a table's state (``sink/history/state_table.py``).
KEY_COLUMNS = "binlake.key-columns"
#: The table property counting the binlogs the stream followed the table onto (a failover, a
#: reset): positions of a new binlog can be below the old one's, so each is stored above every
#: earlier one, at ``epoch << EPOCH_SHIFT`` plus the packed position (``stream/failover.py``).
POSITION_EPOCH = "binlake.position-epoch"
EPOCH_SHIFT = 52
#: ``__origin__`` of the rows a schema change made (``ColumnFill``).
SCHEMA_ORIGIN = "schema"


def changelog_schema(sink: Schema) -> Schema:
    """The changelog's Iceberg schema for a sink table's: its columns, all optional and without
    identifier fields, then the metadata columns."""
    fields = [
        f.model_copy(update={"required": False}) for f in sink.fields if f.name not in SOFT_DELETE.names
    ]
    metadata = _metadata_schema().fields
    top = sink.highest_field_id
    extra = [f.model_copy(update={"field_id": top + i + 1}) for i, f in enumerate(metadata)]
    return Schema(*fields, *extra)


def _metadata_schema() -> Schema:
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    with_ids = pa.schema([f.with_metadata({b"PARQUET:field_id": str(i + 1)}) for i, f in enumerate(METADATA)])
    return pyarrow_to_schema(with_ids)


def ensure_changelog(
    catalog: Catalog,
    identifier: str,
    sink: Schema,
    properties: Mapping[str, str] | None = None,
    keys: Sequence[str] = (),
) -> Table:
    """The changelog table of a sink table (``sink``: its schema; ``properties``: its table
    properties, whose compression it takes; ``keys``: its key columns, recorded): created if
    missing (partitioned by the day of ``__event_time__``, sorted by position), else given the
    sink's columns it lacks (a column the source added; columns the source dropped stay, as
    earlier rows hold them)."""
    wanted = changelog_schema(sink)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        table = _create(catalog, identifier, wanted, properties or {})
    else:
        follow_sink_columns(table, wanted)
    if keys and table.properties.get(KEY_COLUMNS) != json.dumps(list(keys)):
        with table.transaction() as tx:
            tx.set_properties({KEY_COLUMNS: json.dumps(list(keys))})
    return table


def follow_sink_columns(table: Table, wanted: Schema) -> None:
    """Give a changelog or history table (``table``) the columns of its sink table it lacks
    (``wanted``: its schema for the sink's) and the types the sink table promoted its columns to
    (int to long, float to double, a wider decimal: the sink's values must fit). Columns the sink
    dropped stay: earlier rows hold them — renamed aside when the sink adds the name again with a
    type they cannot take."""
    have = {f.name: f.field_type for f in table.schema().fields}
    replaced = [
        f.name
        for f in wanted.fields
        if f.name in have and have[f.name] != f.field_type and not is_promotion(have[f.name], f.field_type)
    ]
    if replaced:
        # A column the sink dropped and added again with another type: the earlier rows' values
        # stay under ``<name>__<old type>``, and the new column comes next (two commits; a crash
        # between them leaves a missing column, which the next call adds).
        with table.update_schema() as update:
            for name in replaced:
                update.rename_column(name, _aside(name, have))
        have = {f.name: f.field_type for f in table.schema().fields}
    changed = [f for f in wanted.fields if f.name not in have or is_promotion(have[f.name], f.field_type)]
    if changed:
        with table.update_schema() as update:
            update.union_by_name(Schema(*changed))


def _aside(name: str, have: dict[str, IcebergType]) -> str:
    """A free name for the column ``name`` of type ``have[name]`` that a new one replaces."""
    base = f"{name}__{re.sub(r'[^0-9A-Za-z]+', '_', str(have[name])).strip('_')}"
    found, n = base, 1
    while found in have:
        n += 1
        found = f"{base}_{n}"
    return found


def _create(catalog: Catalog, identifier: str, schema: Schema, sink: Mapping[str, str]) -> Table:
    namespace = identifier.rsplit(".", 1)[0]
    catalog.create_namespace_if_not_exists(namespace)
    time_id = schema.find_field(EVENT_TIME).field_id
    spec = PartitionSpec(PartitionField(time_id, 1000, DayTransform(), "event_day"))
    order = SortOrder(
        SortField(schema.find_field(POSITION).field_id, IdentityTransform()),
        SortField(schema.find_field(ORDER).field_id, IdentityTransform()),
    )
    codec = sink.get("write.parquet.compression-codec")
    properties = {"format-version": "2", **({"write.parquet.compression-codec": codec} if codec else {})}
    return catalog.create_table(
        identifier, schema, partition_spec=spec, sort_order=order, properties=properties
    )


def changelog_rows(
    changes: pa.Table,
    kept: pa.Array | None,
    to_rows: Callable[[pa.Table], pa.Table],
    binlog: str,
    updates: str = "both",
    gtid_of: Callable[[pa.ChunkedArray], pa.Array] | None = None,
) -> pa.Table:
    """One table's changes (``changes``: its change table in binlog order, before images
    included, ``stream.records``) as changelog rows.

    ``kept``: which changes a transform's filter keeps (None: all); ``to_rows``: changes → rows of
    the sink table (a transform's projection applied); ``binlog``: the binlog files' base name;
    ``updates``: ``both`` images of an update or the ``after`` image alone; ``gtid_of``: the
    transaction's GTID of each position (None: not known).
    """
    ops = _ops(changes, kept, after_only=updates == "after")
    keep = pc.is_valid(ops)
    changes, ops = changes.filter(keep), ops.filter(keep)
    at = changes.column("at").combine_chunks()
    meta = {
        OP: ops,
        ORIGIN: pa.array(["binlog"] * changes.num_rows, pa.string()),
        EVENT_TIME: pc.multiply(changes.column("ts"), 1_000_000).cast(pa.timestamp("us", "UTC")),
        POSITION: at,
        BINLOG_FILE: packed_files(at, binlog),
        BINLOG_POS: packed_positions(at),
        ORDER: changes.column("idx"),
        GTID: gtid_of(at) if gtid_of is not None else pa.nulls(changes.num_rows, pa.string()),
    }
    return _with_metadata(to_rows(changes), meta)


def _with_metadata(rows: pa.Table, meta: dict[str, Any]) -> pa.Table:
    for name, values in meta.items():
        field = METADATA.field(name)
        rows = rows.append_column(field, _chunked(values).cast(field.type))
    return rows


def _ops(changes: pa.Table, kept: pa.Array | None, after_only: bool = False) -> pa.Array:
    """Each change's ``__op__``, from its kind and its partner's: an update's two images share the
    event's position and ``idx // 2``; when a filter drops one of them, the other is ``+I`` or
    ``-D``. Null: no row (a filtered image; with ``after_only``, the before image of an update that
    kept its key — one that changed it is a ``-D`` of the old key and a ``+I`` of the new)."""
    kind = changes.column("op").to_numpy(zero_copy_only=False)
    first = np.isin(kind, ["before", "delete"])  # an update's before image, or a delete
    n = len(kind)
    alive = np.ones(n, bool) if kept is None else np.asarray(kept.to_numpy(zero_copy_only=False), bool)
    at = changes.column("at").to_numpy()
    idx = changes.column("idx").to_numpy().astype(np.int64)
    pair = np.zeros(n, bool)  # whose partner (the other image of its update) is alive
    if n:
        # Rows are in binlog order: a partner is the neighbour with the same position and idx // 2.
        same_next = (at[1:] == at[:-1]) & (idx[1:] // 2 == idx[:-1] // 2) & first[:-1] & ~first[1:]
        pair[:-1] |= same_next & alive[1:]
        pair[1:] |= same_next & alive[:-1]
    ops = np.where(first, np.where(pair, BEFORE, DELETE), np.where(pair, AFTER, INSERT)).astype(object)
    if after_only:
        moved = pair & (kind == "delete")  # a key update's old row, or a keyless update's
        ops[moved] = DELETE
        ops[1:][moved[:-1]] = INSERT
        ops[kind == "before"] = None
    ops[~alive] = None
    return pa.array(ops, pa.string())


def _chunked(values: pa.Array | pa.ChunkedArray) -> pa.ChunkedArray:
    return values if isinstance(values, pa.ChunkedArray) else pa.chunked_array([values])


def read_rows(
    rows: pa.Table,
    event_time: int,
    at: BinlogOffset,
    origin: str = "snapshot",
    op: str = INSERT,
    order: int = 0,
) -> pa.Table:
    """Rows read from the source (sink columns) as changelog rows (``+I``: a snapshot chunk's, at
    its high watermark ``at``; a backfill's ``-D`` of the rows it replaces and ``+I`` of its own)
    at ``event_time`` (epoch seconds)."""
    n = rows.num_rows
    meta = {
        OP: pa.array([op] * n, pa.string()),
        ORIGIN: pa.array([origin] * n, pa.string()),
        EVENT_TIME: pa.array([event_time * 1_000_000] * n, pa.int64()),
        POSITION: pa.array([at.packed] * n, pa.int64()),
        BINLOG_FILE: pa.array([at.file] * n, pa.string()),
        BINLOG_POS: pa.array([at.pos] * n, pa.int64()),
        ORDER: pa.array(np.full(n, order, np.int32), pa.int32()),
        GTID: pa.nulls(n, pa.string()),
    }
    return _with_metadata(rows, meta)


def replaced_rows(removed: pa.Table, added: pa.Table, at: BinlogOffset, event_time: int) -> pa.Table:
    """A backfill's key ranges in the changelog: ``-D`` of the rows the sink held there, then ``+I``
    of the rows it holds now, at ``at`` (replaying them sets the ranges to what the source holds)."""
    gone = read_rows(removed, event_time, at, "backfill", DELETE, 0)
    new = read_rows(added.cast(removed.schema), event_time, at, "backfill", INSERT, 1)
    return pa.concat_tables([gone, new])


@dataclass(frozen=True)
class ColumnFill:
    """An ``ADD COLUMN``'s value for the rows a table held (``sink/column_fill.py``), as a changelog
    and a history record it: a change of each of those rows at the statement. The server filled
    them without a row event; without these, replaying the changelog (or the history's current
    versions) would give the column NULL where the source holds the value."""

    column: str
    field_type: IcebergType
    value: pa.Scalar
    source: str | None
    """On a sink table routed sources share: the source table whose rows got the value."""
    at: BinlogOffset
    """The statement's offset."""
    seq: int
    """The change's place in its statement: two columns one ``ALTER`` adds are two changes."""
    change_id: str
    """What the commit records (``offset#seq``): a replay finds it and adds nothing."""
    event_time: int
    """The statement's time (epoch seconds)."""

    def mine(self, rows: pa.Table) -> pa.Table:
        """The rows of ``rows`` that got the value."""
        return of_source(rows, self.source)

    def filled(self, rows: pa.Table) -> pa.Table:
        """``rows`` (which have the column, NULL) with the value in it."""
        index = rows.schema.get_field_index(self.column)
        field = rows.schema.field(index)
        return rows.set_column(index, field, pa.repeat(self.value.cast(field.type), rows.num_rows))


def filled_rows(rows: pa.Table, fill: ColumnFill, after_only: bool) -> pa.Table:
    """``fill`` of ``rows`` (sink columns, the column NULL) as changelog rows: each row's ``-U``
    (without the value) and ``+U`` (with it), or the ``+U`` alone (``changelog_updates: after``)."""
    rows = fill.mine(rows)
    after = read_rows(fill.filled(rows), fill.event_time, fill.at, SCHEMA_ORIGIN, AFTER, 2 * fill.seq + 1)
    if after_only:
        return after
    before = read_rows(rows, fill.event_time, fill.at, SCHEMA_ORIGIN, BEFORE, 2 * fill.seq)
    return pa.concat_tables([before, after.cast(before.schema)])


def epoch_base(table: Table) -> int:
    """What the positions a table stores now carry above the packed position (``POSITION_EPOCH``)."""
    return int(table.properties.get(POSITION_EPOCH, "0")) << EPOCH_SHIFT


def shifted(rows: pa.Table, base: int, columns: tuple[str, ...] = (POSITION,)) -> pa.Table:
    """``rows`` with the positions in ``columns`` raised by ``base`` (``epoch_base``)."""
    if not base:
        return rows
    for name in columns:
        if name in rows.column_names:
            index = rows.schema.get_field_index(name)
            rows = rows.set_column(index, rows.schema.field(index), pc.add(rows.column(name), base))
    return rows


def of_source(rows: pa.Table, source: str | None) -> pa.Table:
    """``rows`` of the source table ``source`` (``database.table``) where routed sources share a sink
    table (``_source_table``); all of them for None, or a table no route shares."""
    mine = source_mask(rows, source)
    return rows if mine is None else rows.filter(mine)
