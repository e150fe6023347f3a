"""Manifest entries kept per process (``pyiceberg_internals.cache_manifest_entries``): a plan
through the cache gives exactly what reading the manifests gives, the cache is used by the stream's
merges, and it stays within its bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake.offsets import BinlogOffset
from binlake.sink import pyiceberg_internals
from binlake.sink.pyiceberg_internals import _ManifestEntries, cache_manifest_entries
from binlake.sink.writer import IcebergWriter
from tests.sink.helpers import content, create, make_catalog, rows


def _entries(reader: _ManifestEntries, writer: IcebergWriter, cached: bool) -> list[tuple[object, ...]]:
    writer.table.refresh()
    snapshot = writer.table.current_snapshot()
    assert snapshot is not None
    found = []
    for manifest in snapshot.manifests(writer.table.io):
        entries = (
            reader.fetch(manifest, writer.table.io, False)
            if cached
            else reader._read(manifest, writer.table.io, False)
        )
        found += [
            (e.status, e.snapshot_id, e.sequence_number, e.file_sequence_number, e.data_file.file_path)
            for e in entries
        ]
    return sorted(found, key=str)


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_plans_through_the_cache_equal_reads_and_merges_use_it(tmp_path: Path, mode: str) -> None:
    cache = cache_manifest_entries()
    catalog = make_catalog(tmp_path)
    identifier = create(catalog, "t", properties={"write.merge.mode": mode})
    writer = IcebergWriter(catalog, identifier, merge_manifests_at=6, key_index_dir=tmp_path / "index")
    writer.merge_batch(1, rows(list(range(300)), "a"), offset=BinlogOffset("b.000001", 10))
    hits = cache.hits
    expected = {i: f"a{i}" for i in range(300)}
    for batch in range(2, 16):
        ids = sorted({(batch * 37 + k * 11) % 300 for k in range(20)})
        gone = [i for i in ((batch * 53 + k * 7) % 300 for k in range(3)) if i not in ids]
        deletes = rows(gone, "").select(["id"])
        writer.merge_batch(batch, rows(ids, f"b{batch}"), deletes, BinlogOffset("b.000001", 10 + batch))
        expected.update({i: f"b{batch}{i}" for i in ids})
        for i in gone:
            expected.pop(i, None)
        assert content(writer) == expected, batch
    assert cache.hits > hits  # the merges planned through it
    assert _entries(cache, writer, cached=True) == _entries(cache, writer, cached=False)


def test_the_cache_stays_within_its_bound(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, "t"))
    for batch in range(1, 8):
        writer.merge_batch(
            batch, rows([batch * 10 + k for k in range(5)], "x"), offset=BinlogOffset("b.000001", batch)
        )
    small = _ManifestEntries(limit=3)
    writer.table.refresh()
    snapshot = writer.table.current_snapshot()
    assert snapshot is not None
    for manifest in snapshot.manifests(writer.table.io):
        small.fetch(manifest, writer.table.io)
    assert small.size <= 3
    assert pyiceberg_internals._cache is not None  # the writer installed the process's cache
