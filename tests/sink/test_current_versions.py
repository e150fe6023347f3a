"""A history batch closes its keys' current versions without reading the table
(``sink/history/current_versions.py``): the versions it writes are those a batch that reads the
stored versions writes, through compaction, a stale index, a held column and a damaged index."""

from __future__ import annotations

import datetime as dt
import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from binlake.offsets import BinlogOffset
from binlake.sink.history.changelog import EVENT_TIME, OP, ORDER, POSITION
from binlake.sink.history.current_versions import VERSION, CurrentVersions
from binlake.sink.history.scd2 import CURRENT, OPENED, VALID_FROM, ensure_history
from binlake.sink.history.scd2_writer import HistoryWriter
from binlake.sink.history.state_table import StateTable
from tests.sink.helpers import POLICY, SMALL_FILES_MOR, compactions, create, make_catalog, rows

START = BinlogOffset("binlog.000001", 4)
LOGGER = "binlake.sink.history.current_versions"


def _history(tmp_path: Path, name: str, count: int = 300, **options: Any) -> HistoryWriter:
    """A history of a new upsert table of ``count`` rows, seeded from it (merge-on-read, key index)."""
    folder = tmp_path / name
    folder.mkdir()
    catalog = make_catalog(folder)
    upsert = catalog.load_table(create(catalog, properties=SMALL_FILES_MOR))
    upsert.append(rows(list(range(count)), "v"))
    ensure_history(catalog, "db.t_history", upsert.schema(), ["id"])
    writer = HistoryWriter(catalog, "db.t_history", ["id"], key_index_dir=folder / "index", **options)
    writer.start_from(StateTable.upsert(upsert), START, [])
    return writer


class Source:
    """A source table's rows and the changelog rows of random batches of changes to it."""

    def __init__(self, count: int, seed: int) -> None:
        self.rows = {i: f"v{i}" for i in range(count)}
        self.rng = random.Random(seed)
        self.position = 1 << 32
        self.next_key = count

    def batch(self, changes: int) -> tuple[pa.Table, BinlogOffset]:
        """Updates (several of one key too), deletes, inserts and key updates, as changelog rows."""
        out: list[dict[str, Any]] = []
        for _ in range(changes):
            self.position += 100
            kind = self.rng.choice(["update", "update", "update", "delete", "insert", "key"])
            if kind == "insert" or not self.rows:
                self._change(out, "+I", self.next_key, f"i{self.position}", 0)
                self.next_key += 1
                continue
            key = self.rng.choice(sorted(self.rows))
            self._change(out, "-D" if kind == "delete" else "-U", key, self.rows.pop(key), 0)
            if kind == "update":
                self._change(out, "+U", key, f"u{self.position}", 1)
            elif kind == "key":
                self._change(out, "+U", self.next_key, f"k{self.position}", 1)
                self.next_key += 1
        return pa.Table.from_pylist(out), BinlogOffset("binlog.000001", self.position & 0xFFFFFFFF)

    def _change(self, out: list[dict[str, Any]], op: str, key: int, value: str, order: int) -> None:
        if op in ("+I", "+U"):
            self.rows[key] = value
        when = dt.datetime.fromtimestamp(1_700_000_000 + self.position % 100_000, dt.UTC)
        out.append({OP: op, "id": key, "v": value, POSITION: self.position, ORDER: order, EVENT_TIME: when})


def _versions(writer: HistoryWriter) -> list[tuple[Any, ...]]:
    """Every version (the seeded ones' start, the time of seeding, left out)."""
    writer.settle()
    writer.table.refresh()
    data = writer.table.scan().to_arrow().to_pylist()
    seeded = [{**r, VALID_FROM: None} if r[OPENED] == START.packed else r for r in data]
    return sorted((tuple(r.values()) for r in seeded), key=repr)


def _current(writer: HistoryWriter) -> dict[int, str]:
    writer.table.refresh()
    data = writer.table.scan(row_filter=f"{CURRENT} == True").to_arrow()
    return {r["id"]: r["v"] for r in data.to_pylist()}


def _reads_nothing(writer: HistoryWriter, monkeypatch: pytest.MonkeyPatch) -> None:
    def stored(keys: pa.Table) -> pa.Table:
        raise AssertionError(f"read the stored versions of {keys.num_rows} keys")

    monkeypatch.setattr(writer, "current", stored)


def test_batches_give_the_versions_a_read_of_the_stored_ones_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Twelve batches through the index (which never reads a stored version, and is built once,
    following compactions) and through reads of the table: the same versions, and the current ones
    the source's rows."""
    indexed = _history(tmp_path, "indexed", compaction=POLICY)
    read = _history(tmp_path, "read")
    _reads_nothing(indexed, monkeypatch)
    source = Source(300, seed=3)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for batch in range(1, 13):
            changes, end = source.batch(40)
            indexed.append_batch(batch, changes, end, filled=["id", "v"])
            read.append_batch(batch, changes, end)
    assert compactions(indexed) > 0
    assert caplog.text.count("indexed the current versions") == 1
    assert _versions(indexed) == _versions(read)
    assert _current(indexed) == source.rows


def test_an_index_behind_the_table_is_rebuilt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A commit the index did not see (a TRUNCATE's closing of every version here; another writer
    elsewhere): the next batch rebuilds it from the table."""
    indexed, read = _history(tmp_path, "indexed"), _history(tmp_path, "read")
    source = Source(300, seed=4)
    changes, end = source.batch(30)
    indexed.append_batch(1, changes, end, filled=["id", "v"])
    read.append_batch(1, changes, end)
    truncated = BinlogOffset("binlog.000001", 500_000)
    for writer in (indexed, read):
        writer.remove_all(StateTable(writer.table, "history"), truncated, "truncate#0", 1_700_000_000)
    source.rows.clear()
    source.position = truncated.packed
    with caplog.at_level(logging.INFO, logger=LOGGER):
        changes, end = source.batch(30)
        indexed.append_batch(2, changes, end, filled=["id", "v"])
        read.append_batch(2, changes, end)
    assert "indexed the current versions" in caplog.text
    assert _versions(indexed) == _versions(read)
    assert _current(indexed) == source.rows


def _dropped_v(keys: list[int], at: int) -> pa.Table:
    """Updates of ``keys`` at position ``at`` on, after ``v`` was dropped (images without it)."""
    out: list[dict[str, Any]] = []
    for i, key in enumerate(keys):
        when = dt.datetime.fromtimestamp(1_700_000_000 + at + i, dt.UTC)
        for op, order in (("-U", 0), ("+U", 1)):
            out.append({OP: op, "id": key, "v": None, POSITION: at + i, ORDER: order, EVENT_TIME: when})
    return pa.Table.from_pylist(out)


def test_a_version_holding_a_column_the_source_no_longer_fills_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``v`` dropped from the source (the history keeps it): a version that holds a value there is
    read from the table when closed, so the closed version keeps its value; the versions opened
    since (``v`` null) are closed from their before images alone."""
    indexed, read = _history(tmp_path, "indexed", count=40), _history(tmp_path, "read", count=40)
    first, second = (1 << 32) + 10, (1 << 32) + 1000
    for writer, filled in ((indexed, ["id"]), (read, None)):
        writer.append_batch(1, _dropped_v([1, 2, 3], first), BinlogOffset("binlog.000001", 20), filled=filled)
    closed = {r[0]: r[1] for r in _versions(indexed) if r[0] in (1, 2, 3) and r[4] is False}
    assert closed == {1: "v1", 2: "v2", 3: "v3"}
    _reads_nothing(indexed, monkeypatch)
    for writer, filled in ((indexed, ["id"]), (read, None)):
        writer.append_batch(
            2, _dropped_v([1, 2, 3], second), BinlogOffset("binlog.000001", 1100), filled=filled
        )
    assert _versions(indexed) == _versions(read)


def test_an_index_naming_versions_the_table_lacks_is_not_trusted(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An index record that names another opening change than the stored version's (damage): the
    batch reads the stored versions instead, and the index is rebuilt."""
    indexed, read = _history(tmp_path, "indexed"), _history(tmp_path, "read")
    source = Source(300, seed=6)
    changes, end = source.batch(30)
    for writer, filled in ((indexed, ["id", "v"]), (read, None)):
        writer.append_batch(1, changes, end, filled=filled)
    index = indexed._versions_index
    assert isinstance(index, CurrentVersions)
    keys = np.array(sorted(source.rows)[:50], np.int64)
    forged = index._lookup(keys)
    forged["opened"] += 7
    index._delta = index._delta.upsert(keys, forged.astype(VERSION))
    changes, end = source.batch(60)
    with caplog.at_level(logging.WARNING):
        indexed.append_batch(2, changes, end, filled=["id", "v"])
        read.append_batch(2, changes, end)
    assert "versions the table does not hold" in caplog.text
    assert _versions(indexed) == _versions(read)
    assert _current(indexed) == source.rows


def test_batches_of_sources_filling_other_columns_do_not_rebuild_the_index_in_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Routed sources that fill different columns, in turn: the index is rebuilt when a column
    first goes unfilled, not at every batch whose sources differ from the last one's."""
    indexed, read = _history(tmp_path, "indexed"), _history(tmp_path, "read")
    source = Source(300, seed=7)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        for batch, filled in enumerate([["id", "v"], ["id"], ["id", "v"], ["id"], ["id", "v"]], 1):
            changes, end = source.batch(20)
            indexed.append_batch(batch, changes, end, filled=filled)
            read.append_batch(batch, changes, end)
    assert caplog.text.count("indexed the current versions") == 2
    assert _versions(indexed) == _versions(read)
