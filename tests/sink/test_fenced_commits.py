"""Iceberg commits fenced by the writer lease: once a newer writer of a command committed to a
table, an older one's commit is refused by the catalog itself, whatever its path (append, merge,
property change), and leaves the table as it was."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from binlake.offsets import BinlogOffset
from binlake.sink.exactly_once import ChunkCommit
from binlake.sink.fenced_commits import epoch_key, fence_commits
from binlake.sink.writer import IcebergWriter
from binlake.state import fencing
from binlake.state.leases import Command
from binlake.state.store import StateStore
from binlake.state.writers import FencedError
from tests.sink.helpers import create, make_catalog, rows


def test_an_older_writer_cannot_commit_after_a_newer_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    catalog = fence_commits(make_catalog(tmp_path), "p")
    identifier = create(catalog)
    store = StateStore(f"sqlite:///{tmp_path / 'state.db'}")
    short = dt.timedelta(seconds=30)
    with fencing.writing(store.engine, "p", Command.STREAM, short) as old:
        stale = IcebergWriter(catalog, identifier)
        stale.merge_batch(0, rows([1, 2], "old"), offset=BinlogOffset("binlog.000001", 100))
        assert stale.table.properties[epoch_key(Command.STREAM)] == str(old.epoch)
        # A newer writer takes over (its lease claimed at a higher epoch) and commits.
        monkeypatch.setattr(old, "check", lambda: None)  # the state store's check passed just before
        newer = fencing.Fence(old.writers, old.lease.__class__(
            old.lease.pipeline, old.lease.holder, old.lease.since, old.lease.expires_at, old.epoch + 1
        ), short)  # fmt: skip
        monkeypatch.setattr(newer, "check", lambda: None)
        monkeypatch.setattr(fencing, "active", lambda pipeline: newer)
        IcebergWriter(catalog, identifier).merge_batch(
            1, rows([3], "new"), offset=BinlogOffset("binlog.000001", 200)
        )
        monkeypatch.setattr(fencing, "active", lambda pipeline: old)
        before = catalog.load_table(identifier).metadata_location
        with pytest.raises(FencedError, match=rf"epoch {old.epoch}\) may no longer commit: a newer writer"):
            stale.merge_batch(2, rows([4], "late"), offset=BinlogOffset("binlog.000001", 300))
        with pytest.raises(FencedError, match="a newer writer"):
            stale.append_files([], [ChunkCommit("t#9", BinlogOffset("binlog.000001", 300), 0)])
        after = catalog.load_table(identifier)
        assert after.metadata_location == before
        assert sorted(after.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
        assert after.properties[epoch_key(Command.STREAM)] == str(old.epoch + 1)


def test_commits_outside_a_writer_run_are_not_fenced(tmp_path: Path) -> None:
    catalog = fence_commits(make_catalog(tmp_path), "p")
    identifier = create(catalog)
    IcebergWriter(catalog, identifier).merge_batch(0, rows([1], "a"))
    table = catalog.load_table(identifier)
    assert not any(key.startswith("binlake.writer-epoch.") for key in table.properties)
