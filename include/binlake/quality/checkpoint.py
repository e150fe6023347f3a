"""A data-quality run: each sink table validated by great-expectations, Data Docs, kept results.

A run reads each sink table at its current Iceberg snapshot (only the columns its expectations
need), validates it against its suite (``expectations``; row count from ``reconcile``), writes
Data Docs HTML to ``<work_dir>/reports/<run>/`` and keeps every table's result in the state
store. great-expectations is imported here only, lazily: it takes seconds to import and Airflow
parses DAG files that must not pay that.
"""

from __future__ import annotations

import datetime as dt
import logging
import re
import shutil
import sys
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from binlake.config import PipelineConfig
from binlake.errors import BinlakeError
from binlake.events import CreateTable
from binlake.offsets import BinlogOffset
from binlake.planner import discover_tables
from binlake.quality import report_assets
from binlake.quality.expectations import Expectation, configured, key_expectations, needed_columns
from binlake.quality.reconcile import RowCount, expected_rows
from binlake.schema.routes import SOURCE_TABLE_COLUMN
from binlake.schema.type_mapping import identifier_columns
from binlake.sink.catalog import open_catalog, sink_name
from binlake.sink.writer import IcebergWriter
from binlake.state.offset_names import STREAM, SWITCH
from binlake.state.store import QualityResult, StateStore

log = logging.getLogger(__name__)


class QualityError(BinlakeError):
    """A data-quality run could not run (not: an expectation failed)."""


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
    folder = config.pipeline.work_dir.resolve() / "reports" / _safe(f"{name}__{run}")
    docs = _DataDocs(folder, run)
    with StateStore(config.pipeline.resolved_state_uri) as store:
        catalog = open_catalog(config)
        plans = store.plans(name).load()
        for number, (identifier, sources) in enumerate(sorted(groups.items()), 1):
            if not catalog.table_exists(identifier):
                result = _missing(run, identifier)
            else:
                stream_at = store.offsets(name).load(STREAM)  # before the table: see `sink_offset`
                writer = IcebergWriter(catalog, identifier)
                offset = sink_offset(stream_at, writer.stream_offset(), store.offsets(name).load(SWITCH))
                counts = [expected_rows(config, store, s, offset, plans) for s in sources]
                result = docs.validate(identifier, writer, _expectations(config, identifier, writer, counts))
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
    """Sink table → the source tables it holds (several for a routed table)."""
    groups: dict[str, list[CreateTable]] = defaultdict(list)
    for schema in discover_tables(config):
        groups[sink_name(config, schema.table)].append(schema)
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
    config: PipelineConfig, identifier: str, writer: IcebergWriter, counts: list[RowCount]
) -> list[Expectation]:
    found = key_expectations(identifier_columns(writer.table.schema()))
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
    return found + configured(identifier, config.quality.tables.get(identifier, []))


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


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)


class _DataDocs:
    """One ephemeral great-expectations context per run, its Data Docs site in ``folder``."""

    def __init__(self, folder: Path, run: str) -> None:
        logging.getLogger("great_expectations").setLevel(logging.WARNING)  # it logs every folder it makes
        import great_expectations as gx

        self.gx = gx
        self.folder = folder
        self.run = run
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.context: Any = gx.get_context(mode="ephemeral")
        # Its progress bars would fill task logs with carriage-return noise; binlake logs per table.
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        site: Any = {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(folder)},
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
        self.context.add_data_docs_site("binlake", site)
        default = (self.context.variables.data_docs_sites or {}).get("local_site", {})
        self.context.delete_data_docs_site("local_site")
        # The ephemeral context made an empty temporary folder for its default site: not needed.
        shutil.rmtree(default.get("store_backend", {}).get("base_directory", ""), ignore_errors=True)
        self.source = self.context.data_sources.add_pandas("binlake")
        self.pages: dict[str, Any] = {}

    def validate(
        self, identifier: str, writer: IcebergWriter, expectations: list[Expectation]
    ) -> QualityResult:
        from great_expectations.exceptions.exceptions import ExpectationNotFoundError
        from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

        suite = self.context.suites.add(self.gx.ExpectationSuite(name=identifier))
        for e in expectations:
            notes = e.meta.get("notes")
            meta = {k: v for k, v in e.meta.items() if k != "notes"}
            try:
                suite.add_expectation(
                    ExpectationConfiguration(
                        type=e.type, kwargs=e.kwargs, meta=meta, notes=notes
                    ).to_domain_obj()
                )
            except ExpectationNotFoundError:
                raise QualityError(
                    f"quality.tables.{identifier}: `{e.type}` is not a great-expectations expectation. "
                    "Fix: use a name from https://greatexpectations.io/expectations (snake_case)."
                ) from None
            except ValueError as err:  # pydantic: missing or unknown arguments
                raise QualityError(
                    f"quality.tables.{identifier}: `{e.type}` with {e.kwargs} is not valid: "
                    f"{' '.join(str(err).split())}"
                ) from None
        batch = self.source.add_dataframe_asset(identifier).add_batch_definition_whole_dataframe(identifier)
        definition = self.context.validation_definitions.add(
            self.gx.ValidationDefinition(name=identifier, data=batch, suite=suite)
        )
        frame = _frame(writer, expectations)
        outcome = definition.run(
            batch_parameters={"dataframe": frame},
            result_format="SUMMARY",
            run_id=self.gx.RunIdentifier(run_name=self.run),
        )
        checks = [_check(r) for r in outcome.results]
        key = self.context.validation_results_store.list_keys()[-1]
        self.pages[identifier] = key
        return QualityResult(
            self.run, identifier, bool(outcome.success), checks, None, dt.datetime.now(dt.UTC)
        )

    def build(self) -> Path:
        self.context.build_data_docs()
        report_assets.vendor(self.folder)
        return self.folder / "index.html"

    def page(self, identifier: str) -> str | None:
        key = self.pages.get(identifier)
        if key is None:
            return None
        urls = self.context.get_docs_sites_urls(resource_identifier=key)
        return unquote(str(urls[0]["site_url"]).removeprefix("file://")) if urls else None


def _frame(writer: IcebergWriter, expectations: list[Expectation]) -> Any:
    """The sink table at its current snapshot, only the columns the suite reads, as pandas."""
    names = [f.name for f in writer.table.schema().fields]
    columns = needed_columns(expectations, names) or names[:1]
    if SOURCE_TABLE_COLUMN in names and SOURCE_TABLE_COLUMN not in columns:
        columns = [SOURCE_TABLE_COLUMN, *columns]
    return writer.table.scan(selected_fields=tuple(columns)).to_arrow().to_pandas()


def _check(result: Any) -> dict[str, Any]:
    config = result.expectation_config
    details = result.result or {}
    error = _exception(result.exception_info)
    if error:
        observed: Any = f"error: {error}"
    elif "observed_value" in details:
        observed = details["observed_value"]
    elif "unexpected_count" in details:
        sample = details.get("partial_unexpected_list") or []
        observed = f"{details['unexpected_count']} unexpected values, e.g. {sample[:5]}"
    else:
        observed = None
    notes = config.notes
    return {
        "expectation": config.type,
        "kwargs": {k: v for k, v in config.kwargs.items() if k != "batch_id"},
        "success": bool(result.success),
        "observed": observed,
        "note": notes if isinstance(notes, str) else "; ".join(notes or []),
    }


def print_quality(number: int, total: int, result: QualityResult) -> None:
    """Progress for people: one line per table checked."""
    failed = sum(not c["success"] for c in result.results)
    verdict = "ok" if result.success else f"{failed} failed"
    checks = f"{len(result.results)} check{'' if len(result.results) == 1 else 's'}"
    print(f"quality {number}/{total} {result.table}: {checks}, {verdict}", file=sys.stderr)


def _exception(info: Any) -> str | None:
    """The message of an exception an expectation raised (a column that does not exist, bounds the
    wrong way round): great-expectations keys its info by metric, or not at all."""
    if not isinstance(info, dict):
        return None
    entries = [info, *(v for v in info.values() if isinstance(v, dict))]
    for entry in entries:
        if entry.get("raised_exception") or entry.get("exception_message"):
            return " ".join(str(entry.get("exception_message") or "unknown error").split())[:300]
    return None
