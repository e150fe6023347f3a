"""``binlake verify --repair``: drifted chunks become a backfill (the stream applies it at its high
watermarks, docs/architecture.md, step 7), and are verified again once applied."""

from __future__ import annotations

import dataclasses
from collections import defaultdict

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.schema.table_rules import table_rules
from binlake.source.chunks.splitter import ChunkRange
from binlake.state.backfills import BackfillLedger
from binlake.state.store import StateStore
from binlake.state.verifications import ChunkVerdict
from binlake.verify.verification import Progress, TableVerification, VerifyReport, verify


def drifted_ranges(report: VerifyReport) -> dict[str, list[ChunkRange]]:
    """Table → the key ranges of its drifted chunks."""
    found: dict[str, list[ChunkRange]] = defaultdict(list)
    for v in report.verdicts:
        if v.status == "drifted":
            found[v.table].append(v.range)
    return dict(found)


def stage_repair(config: PipelineConfig, report: VerifyReport, backfill_id: str) -> int:
    """Plan a backfill of exactly the drifted chunks (one unit per chunk); returns its units."""
    keys = {v.table: v.key_column for v in report.verdicts}
    units = [
        (TableId.parse(table), keys[table], [chunk])
        for table, ranges in sorted(drifted_ranges(report).items())
        for chunk in ranges
    ]
    with StateStore(config.pipeline.resolved_state_uri) as store:
        BackfillLedger(store).create(config.pipeline.name, backfill_id, units)
    return len(units)


def verify_again(
    config: PipelineConfig, report: VerifyReport, progress: Progress | None = None
) -> VerifyReport:
    """``report`` with its drifted chunks verified again once their repair is applied: ``repaired``
    when equal now (recorded under the first verification's id too)."""
    second = verify(config, f"{report.verify_id}-repair", ranges=drifted_ranges(report), progress=progress)
    return _after_repair(config, report, second)


def _after_repair(config: PipelineConfig, report: VerifyReport, second: VerifyReport) -> VerifyReport:
    again = {(v.table, v.range): v for v in second.verdicts}
    changed: list[ChunkVerdict] = []
    for table in report.tables:
        verdicts = []
        for v in table.verdicts:
            now = again.get((v.table, v.range)) if v.status == "drifted" else None
            if now is not None:
                status = "repaired" if now.status == "equal" else now.status
                v = dataclasses.replace(now, index=v.index, status=status)
                changed.append(v)
            verdicts.append(v)
        table.verdicts = verdicts
    with StateStore(config.pipeline.resolved_state_uri) as store:
        store.verifications(config.pipeline.name).record(report.verify_id, changed)
    return report


def stored_report(config: PipelineConfig, verify_id: str) -> VerifyReport:
    """A verification as the state store keeps it (what a later task of the same run reads)."""
    report = VerifyReport(verify_id, config.pipeline.name)
    with StateStore(config.pipeline.resolved_state_uri) as store:
        verdicts = store.verifications(config.pipeline.name).verdicts(verify_id)
    by_table: dict[str, list[ChunkVerdict]] = defaultdict(list)
    for v in verdicts:
        by_table[v.table].append(v)
    for table, found in sorted(by_table.items()):
        sink = table_rules(config, TableId.parse(table)).state_name
        report.tables.append(
            TableVerification(table, sink, found[0].key_column, sorted(found, key=lambda v: v.index))
        )
    return report
