"""A data-quality run: each sink table validated by great-expectations, Data Docs, kept results.

A run reads each source table's state table (``sink/history/state_table.py``: the upsert table, or
a history's current versions, or the state a changelog replays to) at its current Iceberg
snapshot (only the columns its expectations need), validates it against its suite
(``expectations``; row count from ``reconcile``), writes
Data Docs HTML to ``<work_dir>/reports/<run>/`` and keeps every table's result in the state
store. great-expectations is imported here only, lazily: it takes seconds to import and Airflow
parses DAG files that must not pay that.
"""

from __future__ import annotations

import datetime as dt
import logging
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pyarrow as pa

from binlake.config import PipelineConfig
from binlake.events import CreateTable
from binlake.offsets import BinlogOffset
from binlake.planner import discover_tables
from binlake.quality import QualityError
from binlake.quality.data_docs import DataDocs, safe_name
from binlake.quality.expectations import Expectation, configured, key_expectations, needed_columns
from binlake.quality.reconcile import RowCount, expected_rows
from binlake.schema.routes import SOURCE_TABLE_COLUMN
from binlake.schema.table_rules import TableRules, table_rules
from binlake.sink.catalog import open_catalog
from binlake.sink.history.soft_delete import COLUMNS as SOFT_DELETE
from binlake.sink.history.soft_delete import DELETED, live
from binlake.sink.history.state_table import StateTable, state_table
from binlake.state.offset_names import STREAM, SWITCH
from binlake.state.store import QualityResult, StateStore

log = logging.getLogger(__name__)


@dataclass
class QualityReport:
    """What a quality run found; ``as_dict`` is the JSON summary (XCom)."""

    pipeline: str
    run_name: str
    on_failure: str
    results: list[QualityResult] = field(default_factory=list)
    index: Path | None = None
    """The run's Data Docs index page."""

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)

    def failures(self) -> list[str]:
        """One line per failed expectation: table, expectation, arguments, what was found."""
        lines = []
        for result in self.results:
            for check in result.results:
                if not check["success"]:
                    args = ", ".join(f"{k}={v}" for k, v in check["kwargs"].items())
                    lines.append(f"{result.table}: {check['expectation']}({args}): found {check['observed']}")
        return lines

    def as_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "run_name": self.run_name,
            "success": self.success,
            "on_failure": self.on_failure,
            "report": str(self.index) if self.index else None,
            "tables": {r.table: {"success": r.success, "report": r.report} for r in self.results},
            "failures": self.failures(),
        }


def run_quality(
    config: PipelineConfig,
    tables: Sequence[str] | None = None,
    run_name: str | None = None,
    progress: Callable[[int, int, QualityResult], None] | None = None,
) -> QualityReport:
    """Validate the pipeline's sink tables (or ``tables``: sink or source names).

    Raises:
        QualityError: a named table is not one of the pipeline's; an expectation in the YAML is
            unknown to great-expectations or has wrong arguments.
    """
    name = config.pipeline.name
    run = run_name or f"{dt.datetime.now(dt.UTC):%Y%m%dT%H%M%SZ}"
    report = QualityReport(name, run, config.quality.on_failure)
    groups = _sink_tables(config, tables)
    folder = config.pipeline.work_dir.resolve() / "reports" / safe_name(f"{name}__{run}")
    docs = DataDocs(folder, run)
    with StateStore(config.pipeline.resolved_state_uri) as store:
        catalog = open_catalog(config)
        plans = store.plans(name).load()
        for number, (identifier, sources) in enumerate(sorted(groups.items()), 1):
            if not catalog.table_exists(identifier):
                result = _missing(run, identifier)
            else:
                stream_at = store.offsets(name).load(STREAM)  # before the table: see `sink_offset`
                rules = table_rules(config, sources[0].table)
                state = state_table(rules, catalog)
                assert state is not None
                offset = sink_offset(stream_at, state.stream_offset(), store.offsets(name).load(SWITCH))
                counts = [expected_rows(config, store, s, offset, plans) for s in sources]
                expectations = _expectations(config, rules, state, counts)
                result = docs.validate(identifier, _frame(state, expectations), expectations)
                result.results.extend(_skipped(counts))
            report.results.append(result)
            if progress:
                progress(number, len(groups), result)
        report.index = docs.build()
        report.results = [replace(r, report=docs.page(r.table)) for r in report.results]
        for result in report.results:
            store.quality(name).record(result)
    return report


def _sink_tables(config: PipelineConfig, wanted: Sequence[str] | None) -> dict[str, list[CreateTable]]:
    """State table (``sink/history/state_table.py``) → the source tables it holds (several for a
    routed table)."""
    groups: dict[str, list[CreateTable]] = defaultdict(list)
    for schema in discover_tables(config):
        groups[table_rules(config, schema.table).state_name].append(schema)
    if not wanted:
        return dict(groups)
    chosen = {
        sink: sources
        for sink, sources in groups.items()
        if sink in wanted or any(s.table.name in wanted for s in sources)
    }
    known = set(groups) | {s.table.name for sources in groups.values() for s in sources}
    unknown = [t for t in wanted if t not in known]
    if unknown:
        raise QualityError(
            f"Cannot check {', '.join(map('`{}`'.format, unknown))}: not a table of pipeline "
            f"`{config.pipeline.name}`; "
            f"its sink tables are {', '.join(sorted(groups)) or 'none'}."
        )
    return chosen


def sink_offset(
    stream_at: BinlogOffset | None, table_at: BinlogOffset | None, switch: BinlogOffset | None
) -> BinlogOffset | None:
    """The binlog offset the sink table holds the source at.

    The stream records its offset after a batch's Iceberg commits, and a table's own offset only
    moves when a batch changes it: so the stream's offset read *before* loading the table is one
    the table holds, unless the table has committed a later batch since (its own offset, then).
    Before any stream batch, the snapshot's chunks hold it (at the switch offset, with the filter).
    """
    candidates = [o for o in (stream_at, table_at) if o is not None]
    return max(candidates) if candidates else switch


def _expectations(
    config: PipelineConfig, rules: TableRules, state: StateTable, counts: list[RowCount]
) -> list[Expectation]:
    identifier = rules.state_name
    found = key_expectations(state.keys())
    if counts and all(c.checked for c in counts):
        found.insert(
            0,
            Expectation(
                "expect_table_row_count_to_be_between",
                {
                    "min_value": sum(c.minimum or 0 for c in counts),
                    "max_value": sum(c.maximum or 0 for c in counts),
                },
                {"binlake": "the source's row count at the sink's offset", "notes": [c.note for c in counts]},
            ),
        )
    # Kept without an upsert table: the rules written for the sink table's own name apply too.
    tables = config.quality.tables
    return found + configured(identifier, tables.get(identifier) or tables.get(rules.sink_name, []))


def _skipped(counts: list[RowCount]) -> list[dict[str, Any]]:
    """Row counts that could not be checked: in the results with their reason, not as failures."""
    return [
        {"expectation": "row count", "kwargs": {}, "success": True, "observed": "not checked", "note": c.note}
        for c in counts
        if not c.checked
    ]


def _missing(run: str, identifier: str) -> QualityResult:
    check = {
        "expectation": "table exists",
        "kwargs": {},
        "success": False,
        "observed": "no such Iceberg table",
        "note": "run the snapshot (or let the stream create it) first",
    }
    return QualityResult(run, identifier, False, [check], None, dt.datetime.now(dt.UTC))


def _frame(state: StateTable, expectations: list[Expectation]) -> Any:
    """The state table's current rows (``sink/history/state_table.py``), only the columns the suite
    reads, as pandas."""
    table = state.table
    names = [f.name for f in state.sink_arrow() if f.name not in SOFT_DELETE.names]
    columns = needed_columns(expectations, names) or names[:1]
    if SOURCE_TABLE_COLUMN in names and SOURCE_TABLE_COLUMN not in columns:
        columns = [SOURCE_TABLE_COLUMN, *columns]
    if state.kind != "upsert":  # a history's current versions, a changelog's replayed state
        wanted = pa.schema([state.sink_arrow().field(c) for c in columns])
        parts = list(state.rows(wanted))
        return (
            pa.concat_tables(parts, promote_options="permissive") if parts else wanted.empty_table()
        ).to_pandas()
    if DELETED in table.schema().column_names:  # soft deletes: the checks are of the live rows
        rows = live(table.scan(selected_fields=(*columns, DELETED)).to_arrow())
        return rows.drop_columns([DELETED]).to_pandas()
    return table.scan(selected_fields=tuple(columns)).to_arrow().to_pandas()


def print_quality(number: int, total: int, result: QualityResult) -> None:
    """Progress for people: one line per table checked."""
    failed = sum(not c["success"] for c in result.results)
    verdict = "ok" if result.success else f"{failed} failed"
    checks = f"{len(result.results)} check{'' if len(result.results) == 1 else 's'}"
    print(f"quality {number}/{total} {result.table}: {checks}, {verdict}", file=sys.stderr)
