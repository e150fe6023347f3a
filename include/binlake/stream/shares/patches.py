"""Changes whose row images lacked columns, completed from the rows' previous values.

A session with ``binlog_row_image`` NOBLOB or MINIMAL logs an update's after image without the
columns it did not change (``stream.records``: the ``absent`` bitmask): those columns keep the
values the row had. Per key, in binlog order, the value comes from the key's previous change in
the batch, or else from the sink, which holds every change before the batch; a column is never
written as NULL where the source holds a value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from binlake.errors import BinlakeError
from binlake.offsets import packed_text
from binlake.stream.records import ABSENT_COLUMNS, ROW, absent_columns, images

#: The stored rows (all columns) of the given keys (a table of the key columns).
PreviousRows = Callable[[pa.Table], pa.Table]


class IncompleteRowError(BinlakeError):
    """An update lacks columns, and the row's previous values are nowhere to be found."""


def complete(
    changes: pa.Table, keys: Sequence[str], previous: PreviousRows, table: str, transformed: bool = False
) -> pa.Table:
    """``changes`` (one keyed table's change table, in binlog order) with every absent column
    filled (see the module docstring). An update that changed the key arrives as a delete of the
    old key followed by the upsert of the new one (same position, consecutive ``idx``): its absent
    columns come from the old key's row.

    ``transformed``: the sink holds a transform's projection, not the source's columns, so it
    cannot supply them: such an update stops the stream."""
    absent = changes.column(ABSENT_COLUMNS)
    if absent.null_count == len(absent):
        return changes
    if transformed:
        first = changes.filter(absent.is_valid()).column("at")[0].as_py()
        raise IncompleteRowError(
            f"An update of {table} (binlog position {packed_text(first)}) lacks columns "
            "(`binlog_row_image` NOBLOB or MINIMAL in the writing session), and the table is transformed: "
            "its sink holds the projection, not the source's columns, so it cannot supply them. Nothing of "
            f"the batch was written. Fix: set `binlog_row_image = 'FULL'` in that application's sessions and "
            f"backfill {table} (`binlake backfill --table {table}`)."
        )
    names = [f.name for f in changes.schema.field(ROW).type]
    key_of = [tuple(r.values()) for r in images(changes, keys).to_pylist()]
    masks = absent.to_pylist()
    ops, at, idx = (changes.column(c).to_pylist() for c in ("op", "at", "idx"))
    patched = [i for i, m in enumerate(masks) if m is not None]
    base = {i: _moved_from(i, ops, at, idx, key_of) for i in patched}
    wanted = {key_of[i] for i in patched} | set(base.values())
    involved = [i for i, k in enumerate(key_of) if k in wanted]
    rows = changes.take(pa.array(involved, pa.int64())).column(ROW).to_pylist()
    state = _stored(previous, keys, wanted)
    removed: dict[Any, Any] = {}
    filled: dict[int, dict[str, Any]] = {}
    for i, row in zip(involved, rows, strict=True):
        key = key_of[i]
        if ops[i] == "delete":
            if masks[i] is not None:  # a changelog's delete shows the row it removes
                row = filled[i] = _filled(row, state.get(key), masks[i], names, table, keys, key, at[i])
            removed[key] = state.pop(key, None)
            continue
        if masks[i] is not None:
            source = base[i]
            old = removed.get(source) if source != key else state.get(key)
            lacking = absent_columns(masks[i], names)
            if old is None or any(c not in old for c in lacking):
                raise IncompleteRowError(
                    f"An update of {table} (key {dict(zip(keys, key, strict=True))}, binlog position "
                    f"{packed_text(at[i])}) lacks columns {lacking} (`binlog_row_image` NOBLOB "
                    "or MINIMAL in the writing session), and the row's previous values are neither in "
                    "this batch nor in the sink. Nothing of the batch was written. Fix: set "
                    f"`binlog_row_image = 'FULL'` in that application's sessions and backfill {table} "
                    f"(`binlake backfill --table {table}`)."
                )
            row = {**row, **{c: old[c] for c in lacking}}
            filled[i] = row
        state[key] = row
    return _replaced(changes, filled, names)


def _filled(
    row: dict[str, Any],
    old: dict[str, Any] | None,
    mask: bytes,
    names: list[str],
    table: str,
    keys: Sequence[str],
    key: tuple[Any, ...],
    at: int,
) -> dict[str, Any]:
    """A deleted row's image with the columns it lacks taken from the row it deletes."""
    lacking = absent_columns(mask, names)
    if old is None or any(c not in old for c in lacking):
        raise IncompleteRowError(
            f"A delete of {table} (key {dict(zip(keys, key, strict=True))}, binlog position "
            f"{packed_text(at)}) lacks columns {lacking} (`binlog_row_image` MINIMAL in the writing "
            "session), and the row's values are neither in this batch nor in the sink: its changelog row "
            f"cannot show them. Nothing of the batch was written. Fix: set `binlog_row_image = 'FULL'` "
            f"in that application's sessions and backfill {table} (`binlake backfill --table {table}`)."
        )
    return {**row, **{c: old[c] for c in lacking}}


def _moved_from(i: int, ops: list[str], at: list[int], idx: list[int], key_of: list[Any]) -> Any:
    """The key whose row the upsert ``i`` continues: the old key of a key update, else its own."""
    if i > 0 and ops[i - 1] == "delete" and at[i - 1] == at[i] and idx[i - 1] == idx[i] - 1:
        return key_of[i - 1]
    return key_of[i]


def _stored(previous: PreviousRows, keys: Sequence[str], wanted: set[tuple[Any, ...]]) -> dict[Any, Any]:
    """The sink's rows of the wanted keys, by key."""
    key_table = pa.table({k: [key[i] for key in wanted] for i, k in enumerate(keys)})
    stored = previous(key_table).to_pylist()
    return {tuple(r[k] for k in keys): r for r in stored}


def _replaced(changes: pa.Table, filled: dict[int, dict[str, Any]], names: list[str]) -> pa.Table:
    """``changes`` with the rows of ``filled`` replaced and no absent columns left."""
    struct = changes.column(ROW).combine_chunks()
    mask = pa.array([i in filled for i in range(changes.num_rows)], pa.bool_())
    order = sorted(filled)
    fields = []
    for n, name in enumerate(names):
        child = struct.field(n)
        replacement = pa.array([filled[i][name] for i in order], child.type)
        fields.append(pc.replace_with_mask(child, mask, replacement))
    rows = pa.StructArray.from_arrays(fields, fields=list(struct.type), mask=struct.is_null())
    changes = changes.set_column(changes.schema.get_field_index(ROW), ROW, rows)
    nulls = pa.nulls(changes.num_rows, pa.binary())
    return changes.set_column(changes.schema.get_field_index(ABSENT_COLUMNS), ABSENT_COLUMNS, nulls)
