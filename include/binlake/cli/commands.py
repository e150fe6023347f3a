"""The sub-commands: load the config, call the step, print, choose the exit code."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from binlake.cli.render import (
    print_checks,
    print_table,
    print_units,
    print_verdicts,
    print_where,
    show,
    stream_line,
)
from binlake.config import PipelineConfig, display_url
from binlake.config.pipeline_file import load_config
from binlake.errors import BinlakeError, ConfigError
from binlake.logs import register_secret
from binlake.offsets import BinlogOffset
from binlake.source.server.checks import Check
from binlake.source.server.validator import has_errors, validate

if TYPE_CHECKING:
    from binlake.state.holders import Holder
    from binlake.state.store import StateStore

log = logging.getLogger("binlake")

EXIT_OK = 0
EXIT_CHECKS_FAILED = 1
#: The writer command of ``verify --repair`` (one repair of a pipeline at a time).
REPAIR = "binlake verify --repair"


def _load(path: str | None) -> PipelineConfig:
    if not path:
        raise ConfigError("no pipeline config given: pass `--config FILE` or set BINLAKE_CONFIG")
    config = load_config(path)
    for secret in config.secrets():
        register_secret(secret)
    return config


def validate_command(args: argparse.Namespace) -> int:
    path = args.config
    try:
        config = _load(path)
    except ConfigError as e:
        checks = [Check("config", "error", str(e))]
    else:
        checks = [
            Check("config", "ok", f"pipeline `{config.pipeline.name}` read from {path}"),
            *validate(config),
        ]
    failed = has_errors(checks)
    if args.json:
        print(json.dumps({"ok": not failed, "checks": [c.as_dict() for c in checks]}, indent=2))
    else:
        print_checks(checks)
    return EXIT_CHECKS_FAILED if failed else EXIT_OK


def plan_command(args: argparse.Namespace) -> int:
    from binlake.events import TableId
    from binlake.planner import plan
    from binlake.schema.table_rules import table_rules
    from binlake.sink.catalog import open_catalog
    from binlake.sink.layout import describe

    config = _load(args.config)
    plans = plan(
        config, replan=args.replan, progress=lambda t, n: log.info("splitting %s: %d chunks so far", t, n)
    )
    catalog = open_catalog(config)
    rules = {p.table: table_rules(config, p.table) for p in plans}
    layouts = {p.table: describe(catalog.load_table(rules[p.table].state_name)) for p in plans}
    rows: list[dict[str, Any]] = [
        {
            **layouts[p.table],
            "table": p.table.name,
            "sink_table": rules[p.table].state_name,
            "keeps": rules[p.table].beside_state,
            "key_column": p.key_column,
            "strategy": p.strategy,
            "reason": p.reason,
            "chunks": len(p.chunks),
            "finished_chunks": p.finished,
            "min_key": show(p.min_key),
            "max_key": show(p.max_key),
            "estimated_rows": p.estimated_rows,
        }
        for p in plans
    ]
    if args.json:
        print(json.dumps({"pipeline": config.pipeline.name, "tables": rows}, indent=2))
        return EXIT_OK
    print_table(
        [("table", "left"), ("split", "left"), ("chunks", "right"), ("done", "right"),
         ("est. rows", "right"), ("key range", "left")],
        [
            [r["table"], r["strategy"], str(r["chunks"]), str(r["finished_chunks"]),
             f"{r['estimated_rows']:,}", f"`{r['key_column']}` {r['min_key']} … {r['max_key']}"]
            for r in rows
        ],
    )  # fmt: skip
    for r in rows:
        print(f"{r['table']} — why: {r['reason']}")
        partitioned = ", ".join(r["partition_by"]) or "not partitioned"
        order = ", ".join(r["sort_by"]) or "nothing"
        print(f"{r['table']} — sink layout: {partitioned}; sorted by {order}")
        if not rules[TableId.parse(r["table"])].upsert:
            print(f"{r['table']} — kept in {r['sink_table']}, without an upsert table (sink.modes)")
        if r["keeps"]:
            print(f"{r['table']} — also kept in {', '.join(r['keeps'])} (sink.modes)")
    total = sum(r["chunks"] for r in rows)
    where = display_url(config.pipeline.resolved_state_uri)
    print(f"{len(rows)} tables, {total} chunks, plan stored in {where}")
    return EXIT_OK


def snapshot_command(args: argparse.Namespace) -> int:
    from binlake.events import TableId
    from binlake.planner import plan
    from binlake.schema.table_rules import table_rules
    from binlake.snapshot.progress import print_progress
    from binlake.spark.runtime.session import spark_session
    from binlake.spark.snapshot_job import run_snapshot

    config = _load(args.config)
    plan(config)  # keeps an existing plan: a rerun resumes
    spark = spark_session(config, "snapshot")
    try:
        report = run_snapshot(config, spark, args.table or None, args.chunk or None, print_progress)
    finally:
        spark.stop()
    summary = report.as_dict()
    if not args.json:
        print(
            f"snapshot of `{config.pipeline.name}`: {report.chunks_read} chunks read "
            f"({report.chunks_recovered} recognised as committed), {report.rows:,} rows "
            f"in {report.seconds:.1f} s"
        )
        if report.switch_offset:
            print(f"complete: the stream starts at {report.switch_offset}")
        print_where(config, sorted({table_rules(config, TableId.parse(t)).state_name for t in report.tables}))
    print(json.dumps(summary))  # the last line: what an Airflow task pushes to XCom
    return EXIT_OK


def stream_command(args: argparse.Namespace) -> int:
    from binlake.spark.runtime.session import spark_session
    from binlake.spark.stream_job import print_batch, run_stream

    config = _load(args.config)
    stop = threading.Event()
    # SIGTERM (Airflow, systemd, Ctrl-C in a container) ends the stream after its current batch.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    spark = spark_session(config, "stream")
    try:
        report = run_stream(config, spark, args.until_caught_up, print_batch, stop)
    except KeyboardInterrupt:
        stop.set()
        raise
    finally:
        spark.stop()
    if not args.json:
        print(
            f"stream of `{config.pipeline.name}`: {report.batches} batches, {report.rows:,} changes read "
            f"from {report.start} ({report.start_reason}) to {report.end or report.start} "
            f"in {report.seconds:.1f} s"
        )
    print(json.dumps(report.as_dict()))
    return EXIT_OK


def backfill_command(args: argparse.Namespace) -> int:
    from binlake.backfill.plan import KeyRange, new_backfill_id, plan_backfill
    from binlake.backfill.progress import print_progress
    from binlake.backfill.wait import wait_applied
    from binlake.spark.backfill_job import run_backfill
    from binlake.spark.runtime.session import spark_session

    config = _load(args.config)
    backfill_id = args.id or new_backfill_id()
    key_range = KeyRange(args.key_from, args.key_to)
    plan_backfill(config, backfill_id, args.table or None, key_range, args.chunk_size)  # refused before Spark
    spark = spark_session(config, "backfill")
    try:
        report = run_backfill(
            config, spark, backfill_id, args.table or None, key_range, args.chunk_size, print_progress
        )
    finally:
        spark.stop()
    summary = report.as_dict()
    if not args.json:
        print(
            f"backfill `{backfill_id}` of `{config.pipeline.name}`: {report.chunks_read} chunks, "
            f"{report.rows:,} rows staged in {report.seconds:.1f} s; the stream applies them when it "
            "reaches their high watermarks (`binlake status` shows how far)"
        )
    if args.wait:
        units = wait_applied(config, backfill_id, args.timeout, progress=print_units)
        summary["applied"] = len(units)
        if not args.json:
            print(f"backfill `{backfill_id}`: all {len(units)} units applied by the stream")
    print(json.dumps(summary))
    return EXIT_OK


def verify_command(args: argparse.Namespace) -> int:
    from binlake.backfill.plan import KeyRange
    from binlake.verify.report import data_docs
    from binlake.verify.verification import new_verify_id, verify

    config = _load(args.config)
    verify_id = args.id or new_verify_id()
    report = verify(
        config, verify_id, args.table or None, KeyRange(args.key_from, args.key_to), progress=print_verdicts
    )
    if args.repair and not report.clean:
        report = _repair(config, report, args.timeout)
    index = data_docs(config, report)
    if not args.json:
        verdict = "the sink equals the source" if report.clean else "the sink DIFFERS from the source"
        print(f"verify `{verify_id}` of `{config.pipeline.name}`: {verdict} ({len(report.verdicts)} chunks, "
              f"{report.seconds:.1f} s); report: {index}")  # fmt: skip
    print(json.dumps(report.as_dict() | {"report": str(index)}, default=str))
    return EXIT_OK if report.clean else EXIT_CHECKS_FAILED


def _repair(config: PipelineConfig, report: Any, timeout: float | None) -> Any:
    """Backfill the drifted chunks, wait for the stream to apply them, verify them again (one
    repair of a pipeline at a time)."""
    from binlake.state.fencing import writer_lease, writing
    from binlake.state.store import StateStore

    with (
        StateStore(config.pipeline.resolved_state_uri) as store,
        writing(store.engine, config.pipeline.name, REPAIR, writer_lease(config)),
    ):
        return _repair_once(config, report, timeout)


def _repair_once(config: PipelineConfig, report: Any, timeout: float | None) -> Any:
    from binlake.backfill.plan import new_backfill_id
    from binlake.backfill.progress import print_progress
    from binlake.backfill.wait import wait_applied
    from binlake.spark.backfill_job import run_backfill
    from binlake.spark.runtime.session import spark_session
    from binlake.verify.drift_repair import stage_repair, verify_again

    backfill_id = new_backfill_id()
    units = stage_repair(config, report, backfill_id)
    print(f"repair: backfill `{backfill_id}` of the {units} drifted chunks; the stream applies it")
    spark = spark_session(config, "backfill")
    try:
        run_backfill(config, spark, backfill_id, progress=print_progress)
    finally:
        spark.stop()
    wait_applied(config, backfill_id, timeout, progress=print_units)
    report.backfill_id = backfill_id
    return verify_again(config, report, print_verdicts)


def quality_command(args: argparse.Namespace) -> int:
    from binlake.quality.checkpoint import print_quality, run_quality

    config = _load(args.config)
    report = run_quality(config, args.table or None, args.run_name, print_quality)
    if not args.json:
        for line in report.failures():
            print(f"FAILED {line}")
        verdict = (
            "all expectations met" if report.success else f"{len(report.failures())} expectation(s) failed"
        )
        print(f"quality of `{config.pipeline.name}` ({report.run_name}): {verdict}; report: {report.index}")
    print(json.dumps(report.as_dict()))
    failed = not report.success and config.quality.on_failure == "fail"
    return EXIT_CHECKS_FAILED if failed else EXIT_OK


def _watched(status: Any, max_lag: float | None) -> int:
    """``--max-lag``: what is wrong with the stream, on stderr, and exit 1; else 0."""
    from binlake.status import stream_problems

    if max_lag is None:
        return EXIT_OK
    problems = stream_problems(status, max_lag)
    for problem in problems:
        print(f"status: {problem}", file=sys.stderr)
    return EXIT_CHECKS_FAILED if problems else EXIT_OK


def status_command(args: argparse.Namespace) -> int:
    from binlake.status import pipeline_status

    status = pipeline_status(_load(args.config).pipeline)
    if args.json:
        print(status.model_dump_json(indent=2))
        return _watched(status, args.max_lag)
    if status.stream:
        print(stream_line(status.stream))
    for change in status.schema_changes:
        note = f" ({change.message})" if change.message else ""
        print(f"schema change at {change.offset}: {change.change}: {change.status}{note}")
    if status.quality:
        q = status.quality
        verdict = "all expectations met" if q.success else f"FAILED: {', '.join(q.failed)}"
        print(f"quality: run {q.run_name} at {q.checked_at}: {verdict} ({q.report})")
    if status.verification:
        v = status.verification
        counts = "; ".join(
            f"{t}: " + ", ".join(f"{n} {state}" for state, n in sorted(c.items()))
            for t, c in v.tables.items()
        )
        print(f"verify {v.verify_id}: {counts}")
        for line in v.drifted:
            print(f"  drifted: {line}")
    for r in status.repairs:
        how = "healing: the stream reads" if r.healing else "waiting for"
        print(f"held: {r.table} since {r.since} ({r.reason}); {how} backfill {r.backfill_id}")
    for b in status.backfills:
        units = ", ".join(f"{n} {state}" for state, n in sorted(b.units.items()))
        print(f"backfill {b.backfill_id} ({', '.join(b.tables)}): {units}; {b.rows:,} rows staged")
    if not status.tables:
        print(f"pipeline `{status.pipeline}`: nothing planned yet (run `binlake plan`)")
        return EXIT_OK
    print_table(
        [("table", "left"), ("chunks", "right"), ("rows", "right"), ("max high watermark", "left")],
        [
            [t.table, f"{t.finished_chunks}/{t.chunks}", f"{t.rows:,}", t.max_high_watermark or "-"]
            if t.streamed_since is None
            else [t.table, "-", "-", f"streamed since {t.streamed_since}"]
            for t in status.tables
        ],
    )
    switch = BinlogOffset.from_dict(status.switch_offset) if status.switch_offset else None
    print(f"stream start (switch) offset: {switch or 'not yet: the snapshot is unfinished'}")
    return _watched(status, args.max_lag)


def maintain_command(args: argparse.Namespace) -> int:
    from binlake.state.fencing import writer_lease, writing
    from binlake.state.leases import Command
    from binlake.state.store import StateStore

    config = _load(args.config)
    with (
        StateStore(config.pipeline.resolved_state_uri) as store,
        writing(store.engine, config.pipeline.name, Command.MAINTAIN, writer_lease(config)) as fence,
    ):
        return _maintain_tables(config, store, args, fence.lease.holder)


def _maintain_tables(
    config: PipelineConfig, store: StateStore, args: argparse.Namespace, holder: Holder
) -> int:
    from binlake.schema.table_rules import table_rules
    from binlake.sink.catalog import open_catalog
    from binlake.sink.maintenance import MaintenanceOptions, maintain

    stored = store.plans(config.pipeline.name).load()
    plans = {name: p for p in stored for name in table_rules(config, p.table).kept_names}
    if not plans:
        raise BinlakeError(
            f"Nothing to maintain: pipeline `{config.pipeline.name}` has no planned tables yet. "
            "Fix: run `binlake plan` (and the snapshot) first."
        )
    unknown = [t for t in args.table if t not in plans]
    if unknown:
        raise BinlakeError(
            f"Unknown sink tables {unknown}; this pipeline's tables are: {', '.join(sorted(plans))}."
        )
    options = MaintenanceOptions(
        args.expire_older_than, args.orphans_older_than, rewrite_partitions=args.rewrite_partitions
    )
    catalog = open_catalog(config)
    reports = []
    for identifier in args.table or sorted(plans):
        if not catalog.table_exists(identifier):
            log.warning("%s has no Iceberg table yet: skipped", identifier)
            continue
        reports.append(
            maintain(catalog, store, config.pipeline.name, identifier, plans[identifier], options, holder)
        )
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
    for r in [] if args.json else reports:
        print(
            f"{r.table}: {r.files_compacted} small files compacted into {r.files_written}, "
            f"{r.snapshots_expired} snapshots expired, {r.orphans_removed} orphan files removed "
            f"({r.orphan_bytes:,} bytes) in {r.seconds:.1f} s"
        )
    return EXIT_OK
