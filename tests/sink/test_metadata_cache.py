"""Table metadata treated as an immutable value (``pyiceberg_internals.share_table_metadata``): the
metadata a process keeps by location is what parsing the file gives, a deep copy of a snapshot is
the snapshot, and commits, expiry and reloads through it leave the table a fresh process reads."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from pyiceberg.serializers import FromByteStream

from binlake.sink import pyiceberg_internals
from binlake.sink.writer import IcebergWriter
from tests.sink.helpers import content, create, make_catalog, rows

_READ_FRESH = """
import json, sys
from pyiceberg.catalog.sql import SqlCatalog
tmp = sys.argv[1]
catalog = SqlCatalog("test", uri=f"sqlite:///{tmp}/catalog.db", warehouse=f"file://{tmp}/warehouse")
table = catalog.load_table("db.t")
rows = {r["id"]: r["v"] for r in table.scan().to_arrow().to_pylist()}
print(json.dumps([len(table.snapshots()), sorted(rows.items())]))
"""


def test_kept_metadata_is_what_the_files_hold(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog), keep_snapshots=4)  # installs the sharing
    writer.table.append(rows(list(range(10)), "v"))
    for batch in range(1, 9):
        writer.merge_batch(
            batch, rows([batch, 20 + batch], f"b{batch}-"), pa.table({"id": pa.array([0], pa.int64())})
        )
        writer.settle()
        table = catalog.load_table(writer.identifier)
        with table.io.new_input(table.metadata_location).open() as stream:
            parsed = FromByteStream.table_metadata(stream)
        assert table.metadata == parsed
        assert writer.table.metadata == parsed
    assert pyiceberg_internals._metadata is not None
    assert table.metadata_location in pyiceberg_internals._metadata
    snapshot = writer.table.current_snapshot()
    assert snapshot is not None
    assert copy.deepcopy(snapshot) is snapshot
    assert len(writer.table.snapshots()) <= 5  # expiry committed through it too

    expected = content(writer)
    fresh = subprocess.run(
        [sys.executable, "-c", _READ_FRESH, str(tmp_path)], capture_output=True, text=True, check=True
    )
    count, stored = json.loads(fresh.stdout)
    assert count == len(writer.table.snapshots())
    assert dict(map(tuple, stored)) == expected
