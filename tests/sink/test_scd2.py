"""History versions from changelog rows (``sink/history/scd2.py``): a batch closes the versions its
changes end — those current before it, and those it opened itself — and opens new ones."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pytest

from binlake.sink.history.scd2 import CLOSED, CURRENT, METADATA, OPENED, VALID_FROM, VALID_TO, versions

SCHEMA = pa.schema([pa.field("id", pa.int32(), nullable=False), ("v", pa.string()), *METADATA])


def _time(s: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(s, dt.UTC)


def _changes(*rows: tuple[str, int, str | None, int, int]) -> pa.Table:
    """(op, id, v, position, order) changelog rows, event time = position."""
    names = ("__op__", "id", "v", "__position__", "__order__")
    return pa.Table.from_pylist(
        [{**dict(zip(names, row, strict=True)), "__event_time__": _time(row[3])} for row in rows]
    )


def _current(i: int, v: str) -> dict[str, object]:
    """A version current before the batch, opened at position 1."""
    meta = {
        VALID_FROM: _time(1),
        VALID_TO: None,
        CURRENT: True,
        OPENED: 1,
        "__opened_order__": 0,
        CLOSED: None,
    }
    return {"id": i, "v": v, **meta}


def test_a_batch_closes_and_opens_versions() -> None:
    current = pa.Table.from_pylist([_current(1, "a"), _current(2, "b")], schema=SCHEMA)
    changes = _changes(
        ("-U", 1, "a", 10, 0),  # id 1 updated twice in the batch
        ("+U", 1, "a2", 10, 1),
        ("-U", 1, "a2", 20, 0),
        ("+U", 1, "a3", 20, 1),
        ("-D", 2, "b", 30, 0),  # id 2 deleted, then inserted again
        ("+I", 2, "b2", 40, 0),
        ("+I", 3, "c", 50, 0),  # a new key
    )
    out = {(r["id"], r[OPENED]): r for r in versions(changes, current, ["id"], SCHEMA).to_pylist()}
    assert {k: (r["v"], r[CURRENT], r[CLOSED]) for k, r in out.items()} == {
        (1, 1): ("a", False, 10),
        (1, 10): ("a2", False, 20),
        (1, 20): ("a3", True, None),
        (2, 1): ("b", False, 30),
        (2, 40): ("b2", True, None),
        (3, 50): ("c", True, None),
    }
    assert out[1, 10][VALID_FROM] == _time(10)
    assert out[1, 10][VALID_TO] == _time(20)
    assert out[1, 20][VALID_TO] is None


def test_an_after_image_alone_ends_the_version_before_it() -> None:
    """``changelog_updates: after``, or an update seen without its before image."""
    changes = _changes(("+I", 1, "a", 10, 0), ("+U", 1, "b", 20, 1))
    out = versions(changes, SCHEMA.empty_table(), ["id"], SCHEMA).to_pylist()
    assert [(r["v"], r[CURRENT], r[CLOSED]) for r in out] == [("a", False, 20), ("b", True, None)]


def _replayed(changes: pa.Table, current: pa.Table) -> list[tuple[object, ...]]:
    """The versions a batch writes, replayed one change at a time (the rule, row by row)."""
    open_ = {(r["id"], r["k2"]): dict(r) for r in current.to_pylist()}
    out = {}
    for change in changes.to_pylist():
        key = (change["id"], change["k2"])
        version = open_.pop(key, None)
        if version is not None:
            version.update(
                {VALID_TO: change["__event_time__"], CURRENT: False, CLOSED: change["__position__"]}
            )
            out[(*key, version[OPENED], version["__opened_order__"])] = version
        if change["__op__"] in ("+I", "+U"):
            opened = {n: change[n] for n in ("id", "k2", "v")}
            opened.update({VALID_FROM: change["__event_time__"], VALID_TO: None, CURRENT: True})
            opened.update(
                {OPENED: change["__position__"], "__opened_order__": change["__order__"], CLOSED: None}
            )
            open_[key] = opened
            out[(*key, change["__position__"], change["__order__"])] = opened
    return sorted(tuple(r[n] for n in COMPOSITE.names) for r in out.values())


COMPOSITE = pa.schema(
    [
        pa.field("id", pa.int32(), nullable=False),
        pa.field("k2", pa.string(), nullable=False),
        ("v", pa.string()),
        *METADATA,
    ]
)


@pytest.mark.parametrize("seed", range(20))
def test_versions_match_a_replay_of_each_change(seed: int) -> None:
    """Random batches over a composite key — keys changed many times, deleted and inserted again,
    after images alone, keys current before the batch or not — give the versions a row-by-row
    replay gives."""
    rng = random.Random(seed)
    keys = [(i, s) for i in range(1, 6) for s in ("a", "b")]
    current = pa.Table.from_pylist(
        [{**_current(i, f"c{i}{s}"), "k2": s} for i, s in rng.sample(keys, 5)], schema=COMPOSITE
    )
    rows = []
    for position in range(10, 10 + rng.randint(0, 60)):
        i, s = rng.choice(keys)
        op = rng.choice(["+I", "-U", "+U", "-D"])
        rows.append({"__op__": op, "id": i, "k2": s, "v": f"v{position}", "__position__": position,
                     "__order__": rng.randint(0, 3), "__event_time__": _time(position)})  # fmt: skip
    changes = pa.Table.from_pylist(rows) if rows else pa.Table.from_pylist([], _CHANGES)
    found = versions(changes, current, ["id", "k2"], COMPOSITE)
    assert sorted(tuple(r[n] for n in COMPOSITE.names) for r in found.to_pylist()) == _replayed(
        changes, current
    )


_CHANGES = pa.schema(
    [("__op__", pa.string()), ("id", pa.int32()), ("k2", pa.string()), ("v", pa.string()),
     ("__position__", pa.int64()), ("__order__", pa.int32()), ("__event_time__", pa.timestamp("us", "UTC"))]
)  # fmt: skip


def test_a_filled_column_closes_each_current_version_and_opens_one_with_the_value() -> None:
    from binlake.offsets import BinlogOffset
    from binlake.sink.history.changelog import ColumnFill
    from binlake.sink.history.scd2 import refilled

    schema = pa.schema([*SCHEMA, ("c", pa.int64())])
    current = pa.Table.from_pylist([{**_current(1, "a"), "c": None}, {**_current(2, "b"), "c": None}], schema)
    at = BinlogOffset("binlog.000002", 400)
    fill = ColumnFill("c", None, pa.scalar(7), None, at, 1, "x#1", 50)
    rows = refilled(current, fill, schema).to_pylist()
    closed = [r for r in rows if not r[CURRENT]]
    opened = [r for r in rows if r[CURRENT]]
    assert [(r["id"], r["c"], r[CLOSED], r[VALID_TO]) for r in closed] == [
        (1, None, at.packed, _time(50)),
        (2, None, at.packed, _time(50)),
    ]
    assert [(r["id"], r["v"], r["c"], r[OPENED], r["__opened_order__"], r[VALID_FROM]) for r in opened] == [
        (1, "a", 7, at.packed, 1, _time(50)),
        (2, "b", 7, at.packed, 1, _time(50)),
    ]
