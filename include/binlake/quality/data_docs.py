"""A run's great-expectations Data Docs: one ephemeral context, a site in the run's report folder,
one validation per table (``quality.checkpoint``'s sink checks, ``verify``'s chunk verdicts)."""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from binlake.quality import QualityError, report_assets
from binlake.quality.expectations import Expectation
from binlake.state.store import QualityResult


def safe_name(text: str) -> str:
    """``text`` as a folder name (a run's report folder)."""
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text)


class DataDocs:
    """One ephemeral great-expectations context per run, its Data Docs site in ``folder``."""

    def __init__(self, folder: Path, run: str) -> None:
        logging.getLogger("great_expectations").setLevel(logging.WARNING)  # it logs every folder it makes
        import great_expectations as gx

        self.gx = gx
        self.folder = folder
        # Built aside and renamed into place: the reports app never serves a half-written report.
        self.staging = folder.parent / f".{folder.name}.building-{os.getpid()}"
        shutil.rmtree(self.staging, ignore_errors=True)
        self.run = run
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.context: Any = gx.get_context(mode="ephemeral")
        # Its progress bars would fill task logs with carriage-return noise; binlake logs per table.
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        site: Any = {
            "class_name": "SiteBuilder",
            "show_how_to_buttons": False,
            "store_backend": {
                "class_name": "TupleFilesystemStoreBackend",
                "base_directory": str(self.staging),
            },
            "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
        }
        self.context.add_data_docs_site("binlake", site)
        default = (self.context.variables.data_docs_sites or {}).get("local_site", {})
        self.context.delete_data_docs_site("local_site")
        # The ephemeral context made an empty temporary folder for its default site: not needed.
        shutil.rmtree(default.get("store_backend", {}).get("base_directory", ""), ignore_errors=True)
        self.source = self.context.data_sources.add_pandas("binlake")
        self.pages: dict[str, Any] = {}

    def validate(self, identifier: str, frame: Any, expectations: list[Expectation]) -> QualityResult:
        """Run ``expectations`` on ``frame`` (pandas) as suite ``identifier``; its page is kept."""
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
        outcome = definition.run(
            batch_parameters={"dataframe": frame},
            result_format="SUMMARY",
            run_id=self.gx.RunIdentifier(run_name=self.run),
        )
        checks = [check_result(r) for r in outcome.results]
        key = self.context.validation_results_store.list_keys()[-1]
        self.pages[identifier] = key
        return QualityResult(
            self.run, identifier, bool(outcome.success), checks, None, dt.datetime.now(dt.UTC)
        )

    def build(self) -> Path:
        self.context.build_data_docs()
        report_assets.vendor(self.staging)
        self._publish()
        return self.folder / "index.html"

    def _publish(self) -> None:
        """Put the built report in place of the folder's: two renames, so a reader finds the old
        report whole, then (after at most the instant between them) the new one whole."""
        old = self.folder.parent / f".{self.folder.name}.old-{os.getpid()}"
        shutil.rmtree(old, ignore_errors=True)
        if self.folder.exists():
            self.folder.rename(old)
        self.staging.rename(self.folder)
        shutil.rmtree(old, ignore_errors=True)

    def page(self, identifier: str) -> str | None:
        key = self.pages.get(identifier)
        if key is None:
            return None
        # Not checked against the files: once published they are no longer where they were built.
        urls = self.context.get_docs_sites_urls(resource_identifier=key, only_if_exists=False)
        if not urls:
            return None
        built = Path(unquote(str(urls[0]["site_url"]).removeprefix("file://")))
        return str(self.folder / built.relative_to(self.staging))  # where it is once published


def check_result(result: Any) -> dict[str, Any]:
    """One expectation's outcome as binlake keeps and prints it."""
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
