"""The history table (SCD type 2): one row per version of each key.

A table whose ``sink.modes`` rule lists ``history`` (``config/modes.py``) feeds, beside its upsert
table, ``<sink table>_history``: the sink table's columns (the version's values) and

- ``__valid_from__`` / ``__valid_to__``: when the version began and ended (the binlog event times
  of the changes that made and ended it; a snapshot row: its chunk's read time); ``__valid_to__``
  is null while the version is current;
- ``__current__``: whether it is the key's current version (a deleted key has none);
- ``__opened_position__`` / ``__opened_order__``: the change that made it (binlog position as in
  the changelog, and its order within the event) — with the key, the row's identity;
- ``__closed_position__``: the change that ended it (null while current).

The table as of a binlog position P holds the versions opened at or before P and not closed by
then: ``__opened_position__ <= P AND (__closed_position__ IS NULL OR __closed_position__ > P)``.

A batch's versions come from its changelog rows (``sink/history/changelog.py``, computed whether or not a
changelog table is kept): ``+I``/``+U`` open a version, ``-U``/``-D`` close the key's open one;
the key's current version before the batch (its values: the before image of the key's first
change; its identity and start: ``sink/history/current_versions.py``) is closed in the same commit
that opens the new ones. An ``ADD COLUMN … DEFAULT`` closes every
current version at the statement and opens one with the value (``refilled``). Exactly once as
every sink table: the commit records the batch's end offset (``sink/exactly_once.py``). Tables
without a primary key have no versions to tell apart: ``plan`` refuses them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform

from binlake.sink.history.changelog import EVENT_TIME, OP, ORDER, POSITION, ColumnFill, follow_sink_columns
from binlake.sink.history.soft_delete import COLUMNS as SOFT_DELETE
from binlake.sink.keys.row_match import same_key_as_next
from binlake.sink.merge_on_read import MERGE_MODE, MERGE_ON_READ

VALID_FROM = "__valid_from__"
VALID_TO = "__valid_to__"
CURRENT = "__current__"
OPENED = "__opened_position__"
OPENED_ORDER = "__opened_order__"
CLOSED = "__closed_position__"
_TIME = pa.timestamp("us", "UTC")
METADATA = pa.schema(
    [
        (VALID_FROM, _TIME),
        (VALID_TO, _TIME),
        (CURRENT, pa.bool_()),
        pa.field(OPENED, pa.int64(), nullable=False),
        pa.field(OPENED_ORDER, pa.int32(), nullable=False),
        (CLOSED, pa.int64()),
    ]
)


def history_schema(sink: Schema, keys: Sequence[str]) -> Schema:
    """The history table's schema for a sink table's: its columns (the key's required, the rest
    optional), then the metadata; identified by the key and the change that opened the version."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    kept = [f for f in sink.fields if f.name not in SOFT_DELETE.names]
    fields = [f.model_copy(update={"required": f.name in keys}) for f in kept]
    ids = pa.schema([f.with_metadata({b"PARQUET:field_id": str(i + 1)}) for i, f in enumerate(METADATA)])
    top = sink.highest_field_id
    extra = [
        f.model_copy(update={"field_id": top + i + 1}) for i, f in enumerate(pyarrow_to_schema(ids).fields)
    ]
    by_name = {f.name: f.field_id for f in [*fields, *extra]}
    identity = [by_name[k] for k in [*keys, OPENED, OPENED_ORDER]]
    return Schema(*fields, *extra, identifier_field_ids=identity)


def ensure_history(catalog: Catalog, identifier: str, sink: Schema, keys: Sequence[str]) -> Table:
    """The history table of a sink table (``sink``: its schema): created if missing (sorted by key,
    then by when each version began), else given the sink's columns it lacks."""
    wanted = history_schema(sink, keys)
    try:
        table = catalog.load_table(identifier)
    except NoSuchTableError:
        catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
        order = SortOrder(
            *(
                SortField(wanted.find_field(k).field_id, IdentityTransform())
                for k in [*keys, OPENED, OPENED_ORDER]
            )
        )
        # Merge-on-read: a batch closing versions all over the table writes position deletes and
        # its new versions, not every file it touches (an existing table keeps its mode).
        properties = {"format-version": "2", MERGE_MODE: MERGE_ON_READ}
        return catalog.create_table(identifier, wanted, sort_order=order, properties=properties)
    follow_sink_columns(table, wanted)
    return table


def versions(changes: pa.Table, current: pa.Table, keys: Sequence[str], schema: pa.Schema) -> pa.Table:
    """The history rows a batch writes: the versions its changes open (closed again within it or
    current), and the key's versions current before it (``current``) that they close.

    ``changes``: changelog rows (sink columns and ``sink/history/changelog.py``'s metadata) in replay
    order; ``schema``: the history table's. Each change ends its key's open version (an after image
    alone ends it too) and a ``+I``/``+U`` opens the next: per key, in replay order, a change's
    version is closed by the key's next change; the first change closes the version current before.
    """
    n = changes.num_rows
    ordered, same_next, first = _in_key_order(changes, keys)
    closer = np.where(same_next, np.arange(n) + 1, -1)  # the change that ends each change's version
    opened = _opened(ordered, closer, schema)
    return pa.concat_tables([_ended(ordered.filter(pa.array(first)), current, keys, schema), opened])


def first_changes(changes: pa.Table, keys: Sequence[str]) -> pa.Table:
    """Each key's first change among ``changes`` (in replay order), in key order."""
    ordered, _, first = _in_key_order(changes, keys)
    return ordered.filter(pa.array(first))


def _in_key_order(changes: pa.Table, keys: Sequence[str]) -> tuple[pa.Table, np.ndarray, np.ndarray]:
    """``changes`` in key order, then replay order (``__at__``: each one's place in ``changes``);
    whether the next one changes the same key; whether each is its key's first."""
    ordered = changes.append_column("__at__", pa.array(np.arange(changes.num_rows), pa.int64()))
    ordered = ordered.sort_by([(k, "ascending") for k in keys] + [("__at__", "ascending")])
    same_next = same_key_as_next(ordered, keys)  # the next row (in key order) changes the same key
    first = np.ones(changes.num_rows, dtype=bool)
    first[1:] = ~same_next[:-1]
    return ordered, same_next, first


def current_from_images(
    images: pa.Table, opened: Any, order: Any, valid_from: Any, schema: pa.Schema
) -> pa.Table:
    """The versions current before a batch, as the history holds them: the values of their keys'
    first changes' before images (``images``: changelog rows), opened by the changes ``opened`` /
    ``order`` at ``valid_from`` (``sink/history/current_versions.py``); ``schema``: the history's."""
    n = images.num_rows
    meta = {
        VALID_FROM: valid_from,
        VALID_TO: pa.nulls(n, _TIME),
        CURRENT: pa.array([True] * n, pa.bool_()),
        OPENED: pa.array(opened, pa.int64()),
        OPENED_ORDER: pa.array(order, pa.int32()),
        CLOSED: pa.nulls(n, pa.int64()),
    }
    return _shaped(images, meta, schema)


def _opened(changes: pa.Table, closer: np.ndarray, schema: pa.Schema) -> pa.Table:
    """The versions ``changes`` (in key order) open, each closed by its ``closer`` (-1: current)."""
    opens = pc.is_in(changes.column(OP), pa.array(["+I", "+U"])).to_numpy(zero_copy_only=False)
    ends = changes.take(pa.array(np.clip(closer, 0, None)))
    closed = pa.array(closer >= 0)
    meta = {
        VALID_FROM: changes.column(EVENT_TIME),
        VALID_TO: pc.if_else(closed, ends.column(EVENT_TIME), pa.scalar(None, _TIME)),
        CURRENT: pc.invert(closed),
        OPENED: changes.column(POSITION),
        OPENED_ORDER: changes.column(ORDER),
        CLOSED: pc.if_else(closed, ends.column(POSITION), pa.scalar(None, pa.int64())),
    }
    return _shaped(changes, meta, schema).filter(pa.array(opens))


def _ended(firsts: pa.Table, current: pa.Table, keys: Sequence[str], schema: pa.Schema) -> pa.Table:
    """The versions current before the batch that its keys' first changes (``firsts``) close."""
    if not current.num_rows or not firsts.num_rows:
        return schema.empty_table()
    ends = {k: firsts.column(k).cast(current.schema.field(k).type) for k in keys}
    ends.update(__end_time__=firsts.column(EVENT_TIME), __end_at__=firsts.column(POSITION))
    joined = current.join(pa.table(ends), keys=list(keys), join_type="inner")
    return closed(joined, joined.column("__end_time__"), joined.column("__end_at__"), schema)


def closed(versions: pa.Table, times: Any, positions: Any, schema: pa.Schema) -> pa.Table:
    """``versions`` (current ones) closed at ``times`` (their ends' event times) and ``positions``,
    as rows of ``schema``."""
    meta = {VALID_TO: times, CURRENT: pa.array([False] * versions.num_rows, pa.bool_()), CLOSED: positions}
    return _shaped(versions, meta, schema)


def _shaped(rows: pa.Table, meta: dict[str, Any], schema: pa.Schema) -> pa.Table:
    """``rows``' columns of ``schema`` (nulls where they have none), ``meta`` in place of theirs."""
    n = rows.num_rows
    arrays = []
    for field in schema:
        values = meta.get(field.name)
        if values is None:
            values = rows.column(field.name) if field.name in rows.column_names else pa.nulls(n, field.type)
        arrays.append(pc.cast(values, field.type))
    return pa.table(arrays, schema=schema)


def refilled(current: pa.Table, fill: ColumnFill, schema: pa.Schema, base: int = 0) -> pa.Table:
    """An ``ADD COLUMN``'s fill of ``current`` versions (which have the column, NULL): each closed
    at the statement, and the version with the value opened there (``schema``: the history's;
    ``base``: its positions' epoch, ``changelog.epoch_base``)."""
    n = current.num_rows
    times = pa.array([fill.event_time * 1_000_000] * n, pa.int64()).cast(_TIME)
    at = pa.array([fill.at.packed + base] * n, pa.int64())
    meta = {
        VALID_FROM: times,
        VALID_TO: pa.nulls(n, _TIME),
        CURRENT: pa.array([True] * n, pa.bool_()),
        OPENED: at,
        OPENED_ORDER: pa.array([fill.seq] * n, pa.int32()),
        CLOSED: pa.nulls(n, pa.int64()),
    }
    return pa.concat_tables([closed(current, times, at, schema), _shaped(fill.filled(current), meta, schema)])


def current(rows: pa.Table) -> pa.Table:
    """A history's current versions among ``rows`` (all of them, if they are not a history's)."""
    if CURRENT not in rows.column_names:
        return rows
    return rows.filter(pc.fill_null(rows.column(CURRENT), False))


def opened_rows(rows: pa.Table, event_time: int, position: int) -> pa.Table:
    """Rows read from the source (a snapshot chunk's) as current versions opened at ``position``."""
    n = rows.num_rows
    meta = {
        VALID_FROM: pa.array([event_time * 1_000_000] * n, pa.int64()).cast(_TIME),
        VALID_TO: pa.nulls(n, _TIME),
        CURRENT: pa.array([True] * n, pa.bool_()),
        OPENED: pa.array([position] * n, pa.int64()),
        OPENED_ORDER: pa.array([0] * n, pa.int32()),
        CLOSED: pa.nulls(n, pa.int64()),
    }
    for name, values in meta.items():
        rows = rows.append_column(METADATA.field(name), values)
    return rows
