"""Soft-delete marks (``sink/history/soft_delete.py``): live and deleted rows, and what readers keep."""

from __future__ import annotations

import pyarrow as pa

from binlake.sink.history.soft_delete import (
    DELETED,
    DELETED_AT,
    DELETED_POSITION,
    live,
    marked_deleted,
    marked_live,
)


def test_marks_and_the_live_rows() -> None:
    rows = pa.table({"id": [1, 2]})
    alive = marked_live(rows)
    assert alive.column(DELETED).to_pylist() == [False, False]
    assert alive.column(DELETED_AT).null_count == 2
    gone = marked_deleted(rows, pa.array([1_700_000_000, 1_700_000_001]), pa.array([(1 << 32) + 4, 9]))
    assert gone.column(DELETED).to_pylist() == [True, True]
    assert gone.column(DELETED_AT)[0].as_py().timestamp() == 1_700_000_000
    assert gone.column(DELETED_POSITION).to_pylist() == [(1 << 32) + 4, 9]
    both = pa.concat_tables([alive, gone.cast(alive.schema)])
    assert live(both).column("id").to_pylist() == [1, 2]
    # rows written before the rule (null) are live; a table without the columns is all live
    unknown = both.set_column(1, DELETED, pa.array([None, None, True, True], pa.bool_()))
    assert live(unknown).num_rows == 2
    assert live(rows) is rows
