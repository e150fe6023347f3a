"""Clear ranges in a batch commit (a backfill's replace): every stored row in the range goes, in
both write modes and for tables without a key, in the same commit as the batch."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from binlake.offsets import BinlogOffset
from binlake.sink.keys.row_match import ClearRange, clear_mask
from binlake.sink.writer import IcebergWriter
from tests.sink.helpers import content, create, make_catalog, rows


@pytest.mark.parametrize("mode", ["copy-on-write", "merge-on-read"])
def test_a_cleared_range_is_replaced_by_the_upserts_alone(tmp_path: Path, mode: str) -> None:
    catalog = make_catalog(tmp_path)
    writer = IcebergWriter(catalog, create(catalog, properties={"write.merge.mode": mode}))
    for start in range(0, 300, 100):
        writer.table.append(rows(list(range(start, start + 100)), "v"))
    # The range [100, 200) is replaced by 150..159 only; 50 is an ordinary upsert, 250 a delete.
    result = writer.merge_batch(
        1,
        rows([50, *range(150, 160)], "n"),
        pa.table({"id": pa.array([250], pa.int64())}),
        offset=BinlogOffset("binlog.000001", 100),
        clear=[ClearRange("id", 100, 200)],
    )
    assert result.outcome == "committed"
    expected = {i: f"v{i}" for i in [*range(0, 100), *range(200, 300)] if i != 250}
    expected.update({50: "n50", **{i: f"n{i}" for i in range(150, 160)}})
    assert content(writer) == expected
    # Replayed (same offset): skipped, nothing cleared again.
    again = writer.merge_batch(
        1, rows([], "x"), None, BinlogOffset("binlog.000001", 100), [ClearRange("id", 0, 300)]
    )
    assert again.outcome == "skipped"
    assert content(writer) == expected


def test_open_ranges_take_nulls_and_routed_ranges_one_source_table() -> None:
    data = pa.table(
        {
            "k": pa.array([None, 1, 5, 10, 5], pa.int64()),
            "_source_table": ["a", "a", "a", "a", "b"],
        }
    )
    assert clear_mask(data, [ClearRange("k", None, 5)]).to_pylist() == [True, True, False, False, False]
    assert clear_mask(data, [ClearRange("k", 5, None)]).to_pylist() == [False, False, True, True, True]
    routed = [ClearRange("k", 5, None, source_table="b")]
    assert clear_mask(data, routed).to_pylist() == [False, False, False, False, True]


def test_rows_without_a_key_clear_their_range_then_remove_by_identity(tmp_path: Path) -> None:
    catalog = make_catalog(tmp_path)
    # apply_rows (whole-row identity) with the id column as the chunk key, as for a keyless table.
    writer = IcebergWriter(catalog, create(catalog))
    writer.table.append(rows([1, 1, 2, 3, 7, 8], "v"))
    writer.apply_rows(
        1,
        rows([2, 2], "n"),  # the backfilled range [2, 5) now holds two rows of 2
        rows([8], "v"),  # outside the range: removed by identity
        BinlogOffset("binlog.000001", 100),
        "id",
        clear=[ClearRange("id", 2, 5)],
    )
    writer.table.refresh()
    stored = sorted((r["id"], r["v"]) for r in writer.table.scan().to_arrow().to_pylist())
    assert stored == [(1, "v1"), (1, "v1"), (2, "n2"), (2, "n2"), (7, "v7")]
