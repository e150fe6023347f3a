"""The state table (``sink/history/state_table.py``): a source table's current rows where it keeps
no upsert table — a history's current versions, the state a changelog replays to (signed, or by
key for after images alone) — all of them, or those of some keys; and the schema an upsert table
would have, which the tables kept beside it follow."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from binlake.offsets import BinlogOffset
from binlake.sink.history.changelog import METADATA, ensure_changelog, read_rows
from binlake.sink.history.changelog_writer import ChangelogWriter
from binlake.sink.history.scd2 import METADATA as HISTORY
from binlake.sink.history.scd2 import ensure_history, opened_rows
from binlake.sink.history.state_table import StateTable, shaped_reads
from binlake.sink.pyiceberg_internals import transaction
from tests.sink.helpers import SCHEMA, create, make_catalog, rows

FILE = "binlog.000001"
AT = BinlogOffset(FILE, 100)


def _changelog(tmp_path: Path, keys: tuple[str, ...] = ("id",)) -> ChangelogWriter:
    catalog = make_catalog(tmp_path)
    sink = catalog.load_table(create(catalog)).schema()
    ensure_changelog(catalog, "db.t_changelog", sink, keys=keys)
    return ChangelogWriter(catalog, "db.t_changelog")


def _append(writer: ChangelogWriter, changes: list[tuple[str, int, str, int, int]]) -> None:
    """Changes (op, id, v, position, order) appended as changelog rows."""
    shaped = [
        read_rows(pa.table({"id": [i], "v": [v]}, schema=SCHEMA), 0, BinlogOffset.unpacked(FILE, at),
                  "binlog", op, order)
        for op, i, v, at, order in changes
    ]  # fmt: skip
    with transaction(writer.table) as tx:
        writer._add_rows(tx, pa.concat_tables(shaped), {})


CHANGES = [
    ("+I", 1, "a", 1 << 32 | 10, 0),
    ("+I", 2, "b", 1 << 32 | 10, 0),
    ("-U", 1, "a", 1 << 32 | 20, 0),
    ("+U", 1, "a2", 1 << 32 | 20, 1),
    ("-U", 2, "b", 1 << 32 | 30, 0),  # a key update: 2 → 3
    ("+U", 3, "b", 1 << 32 | 30, 1),
    ("+I", 4, "d", 1 << 32 | 40, 0),
    ("-D", 4, "d", 1 << 32 | 50, 0),
]


def test_a_changelog_replays_to_its_state_signed_or_by_key(tmp_path: Path) -> None:
    writer = _changelog(tmp_path)
    _append(writer, CHANGES)
    state = StateTable(writer.table, "changelog", signed=True)
    assert state.keys() == ["id"]
    found = sorted(pa.concat_tables(state.rows(SCHEMA)).to_pylist(), key=lambda r: r["id"])
    assert found == [{"id": 1, "v": "a2"}, {"id": 3, "v": "b"}]
    # After images alone: each key's last change decides (the ``-U`` rows are not there).
    by_key = StateTable(writer.table, "changelog", signed=False)
    assert sorted(r["id"] for r in pa.concat_tables(by_key.rows(SCHEMA)).to_pylist()) == [1, 3]
    keys = pa.table({"id": pa.array([1, 4, 9], pa.int64())})
    assert by_key.rows_of(keys).to_pylist() == [{"id": 1, "v": "a2"}]
    assert state.rows_of(keys).to_pylist() == [{"id": 1, "v": "a2"}]
    assert state.sink_schema().identifier_field_ids == [writer.table.schema().find_field("id").field_id]
    assert [f.name for f in state.sink_arrow()] == ["id", "v"]


def test_a_keyless_changelog_replays_duplicates(tmp_path: Path) -> None:
    writer = _changelog(tmp_path, keys=())
    _append(
        writer, [("+I", 1, "a", 10, 0), ("+I", 1, "a", 10, 1), ("+I", 1, "a", 10, 2), ("-D", 1, "a", 20, 0)]
    )
    state = StateTable(writer.table, "changelog")
    assert state.keys() == []
    assert pa.concat_tables(state.rows(SCHEMA)).to_pylist() == [{"id": 1, "v": "a"}] * 2


def test_a_history_holds_its_current_versions(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    sink = catalog.load_table(create(catalog)).schema()
    table = ensure_history(catalog, "db.t_history", sink, ["id"])
    versions = opened_rows(rows([1, 2], "v"), 0, AT.packed)
    closed = versions.slice(1).set_column(
        versions.schema.get_field_index("__current__"), "__current__", pa.array([False])
    )
    table.append(pa.concat_tables([versions.slice(0, 1), closed]).cast(table.schema().as_arrow()))
    state = StateTable(table, "history")
    assert state.keys() == ["id"]
    assert pa.concat_tables(state.rows(SCHEMA)).to_pylist() == [{"id": 1, "v": "v1"}]
    assert state.rows_of(pa.table({"id": pa.array([1, 2], pa.int64())})).to_pylist() == [{"id": 1, "v": "v1"}]
    assert [f.name for f in state.sink_schema().fields] == ["id", "v"]


@pytest.mark.parametrize("kind", ["changelog", "history", "upsert"])
def test_snapshot_reads_as_rows_of_each_state_table(kind: str) -> None:
    shaped = shaped_reads(kind, rows([1], "v"), 1_700_000_000, AT)  # type: ignore[arg-type]
    extra = {"changelog": METADATA.names, "history": HISTORY.names, "upsert": []}[kind]
    assert shaped.column_names == ["id", "v", *extra]
    if kind == "changelog":
        assert shaped.column("__op__").to_pylist() == ["+I"]
        assert shaped.column("__position__").to_pylist() == [AT.packed]
