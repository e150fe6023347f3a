"""A verification in Data Docs: per table, one great-expectations result over its chunk verdicts
(every chunk ``equal`` or ``repaired``), the others listed with their key ranges and counts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from binlake.config import PipelineConfig
from binlake.quality.data_docs import DataDocs, safe_name
from binlake.quality.expectations import Expectation
from binlake.state.verifications import ChunkVerdict
from binlake.verify.verification import TableVerification, VerifyReport

#: The verdicts a table passes with.
PASSING = ["equal", "repaired"]
_COLUMNS = ["chunk", "verdict", "source_rows", "sink_rows", "at", "note"]
_TYPES = [pa.int64(), pa.string(), pa.int64(), pa.int64(), pa.string(), pa.string()]


def data_docs(config: PipelineConfig, report: VerifyReport) -> Path:
    """Build the report's Data Docs under ``<work_dir>/reports``; returns its index page."""
    name = safe_name(f"{config.pipeline.name}__{report.verify_id}")
    docs = DataDocs(config.pipeline.work_dir.resolve() / "reports" / name, report.verify_id)
    seen: set[str] = set()
    for table in report.tables:  # a table's history is verified after it: named by its sink table
        name = f"verify {table.table}" if table.table not in seen else f"verify {table.sink}"
        seen.add(table.table)
        docs.validate(name, _frame(table), [_expectation(table)])
    return docs.build()


def _expectation(table: TableVerification) -> Expectation:
    counts = ", ".join(f"{table.count(s)} {s}" for s in ("equal", "drifted", "repaired", "unverified"))
    notes = (
        f"{len(table.verdicts)} chunks of {table.table} (sink {table.sink}) verified: {counts}. A chunk's "
        "checksum is its row count and the sum of its rows' MD5 on the source, against the sink's "
        "rolled forward to the same binlog position."
    )
    return Expectation(
        "expect_column_values_to_be_in_set", {"column": "verdict", "value_set": PASSING}, {"notes": notes}
    )


def _frame(table: TableVerification) -> Any:
    rows = [
        {
            "chunk": v.index,
            # A failing chunk's value says where and what: Data Docs lists the unexpected values.
            "verdict": v.status if v.status in PASSING else _detail(table, v),
            "source_rows": v.source_rows,
            "sink_rows": v.sink_rows,
            "at": str(v.at) if v.at else "",
            "note": v.note,
        }
        for v in table.verdicts
    ]
    schema = pa.schema(list(zip(_COLUMNS, _TYPES, strict=True)))
    return pa.Table.from_pylist(rows, schema=schema).to_pandas()


def _detail(table: TableVerification, v: ChunkVerdict) -> str:
    where = f"{table.key_column} in {v.range}"
    if v.status == "unverified":
        return f"unverified: {where}: {v.note}"
    return f"{v.status}: {where}: source {v.source_rows} rows, sink {v.sink_rows} rows at {v.at}"
