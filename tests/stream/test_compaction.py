"""Compaction of a micro-batch: last change per key; whole-row netting for keyless tables."""

from __future__ import annotations

import pickle
from typing import Any

import pyarrow as pa

from binlake.stream.compaction import last_per_key, net_rows
from binlake.stream.records import ARROW_SCHEMA


def rows(*changes: tuple[str, Any, Any]) -> pa.Table:
    data: dict[str, list[Any]] = {f.name: [] for f in ARROW_SCHEMA}
    for at, (op, key, image) in enumerate(changes):
        data["table"].append("db.t")
        data["op"].append(op)
        data["key"].append(pickle.dumps(key))
        data["image"].append(None if image is None else pickle.dumps(image))
        data["at"].append(at)
        data["idx"].append(0)
        data["ts"].append(0)
        data["file"].append(None)
    return pa.table(data, schema=ARROW_SCHEMA)


def test_last_change_per_key_wins() -> None:
    result = last_per_key(
        rows(
            ("upsert", (1,), (1, "a")),
            ("upsert", (2,), (2, "b")),
            ("delete", (1,), None),  # a delete wins over the earlier upsert
            ("upsert", (2,), (2, "c")),
            ("delete", (3,), None),
            ("upsert", (3,), (3, "again")),  # an insert after a delete is an upsert
        )
    )
    assert sorted(pickle.loads(i) for i in result.upsert_images) == [(2, "c"), (3, "again")]
    assert [pickle.loads(k) for k in result.delete_keys] == [(1,)]


def test_keyless_rows_net_out_and_keep_duplicates() -> None:
    result = net_rows(
        rows(
            ("insert", (1,), (1, "x")),
            ("insert", (1,), (1, "x")),
            ("delete", (1,), (1, "x")),
            ("delete", (2,), (2, "y")),
            ("insert", (3,), (3, "z")),
            ("delete", (3,), (3, "z")),
        )
    )
    assert [pickle.loads(i) for i in result.insert_images] == [(1, "x")]
    assert [pickle.loads(i) for i in result.remove_images] == [(2, "y")]
