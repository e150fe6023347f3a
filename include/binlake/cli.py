"""The ``binlake`` command: ``binlake --config FILE <command>``.

Thin on purpose: parse arguments, load the config, call the package, print, choose the exit code.
Errors binlake raises on purpose (``BinlakeError``) are printed as their message alone, never as a
traceback; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import re
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any

from binlake import __version__
from binlake.config import PipelineConfig, load_config
from binlake.errors import BinlakeError, ConfigError
from binlake.logs import register_secret, setup_logging
from binlake.source.validator import Check, has_errors, validate

log = logging.getLogger("binlake")

EXIT_OK = 0
EXIT_CHECKS_FAILED = 1


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="binlake",
        description="Change data capture from MySQL/MariaDB into Apache Iceberg.",
    )
    parser.add_argument("--version", action="version", version=f"binlake {__version__}")
    parser.add_argument(
        "-c",
        "--config",
        default=os.environ.get("BINLAKE_CONFIG"),
        help="pipeline YAML file (default: $BINLAKE_CONFIG)",
    )
    parser.add_argument(
        "--log-level",
        default=os.environ.get("BINLAKE_LOG_LEVEL", "WARNING"),
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        type=str.upper,
        help="log level on stderr (default: WARNING, or $BINLAKE_LOG_LEVEL)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    validate = commands.add_parser(
        "validate", help="check the config and the source server; exit 0 when nothing is an error"
    )
    validate.add_argument("--json", action="store_true", help="print the checks as JSON")
    plan = commands.add_parser(
        "plan", help="validate, discover the tables and split them into chunks (kept in the state store)"
    )
    plan.add_argument("--json", action="store_true", help="print the plan as JSON")
    plan.add_argument("--replan", action="store_true", help="split again, forgetting earlier progress")
    snapshot = commands.add_parser(
        "snapshot", help="plan if needed, then read every unfinished chunk into Iceberg on Spark"
    )
    snapshot.add_argument("--table", action="append", default=[], help="only this source table (db.table)")
    snapshot.add_argument("--chunk", action="append", default=[], help="only this chunk (db.table#id)")
    snapshot.add_argument("--json", action="store_true", help="print the summary as JSON")
    stream = commands.add_parser(
        "stream", help="stream the binlog into Iceberg (after the snapshot, or by `source.startup_mode`)"
    )
    stream.add_argument(
        "--until-caught-up",
        action="store_true",
        help="stop once the position the source has now is applied (scheduled incremental runs)",
    )
    stream.add_argument("--json", action="store_true", help="print the summary as JSON")
    backfill = commands.add_parser(
        "backfill",
        help="re-snapshot tables (or a key range) while the stream runs; the stream applies what it reads",
    )
    backfill.add_argument("--table", action="append", default=[], help="only this source table; repeat")
    backfill.add_argument("--from", dest="key_from", type=int, help="first chunk-key value (integral keys)")
    backfill.add_argument("--to", dest="key_to", type=int, help="chunk-key value to stop before")
    backfill.add_argument("--chunk-size", type=int, help="rows per chunk (default: source.chunk_size)")
    backfill.add_argument("--id", help="backfill id; an existing id resumes (default: a new one)")
    backfill.add_argument(
        "--wait", action="store_true", help="wait until the stream has applied it (the stream must run)"
    )
    backfill.add_argument(
        "--timeout", type=float, help="seconds --wait waits (default: backfill.wait_timeout_s)"
    )
    backfill.add_argument("--json", action="store_true", help="print the summary as JSON")
    status = commands.add_parser("status", help="the plan, chunk progress and the stream's offset and lag")
    status.add_argument("--json", action="store_true", help="print the status as JSON")
    quality = commands.add_parser(
        "quality", help="validate the sink tables with great-expectations; Data Docs under work_dir/reports"
    )
    quality.add_argument("--table", action="append", default=[], help="only this table (sink or source name)")
    quality.add_argument("--run-name", help="name of this run in the report and the state store")
    quality.add_argument("--json", action="store_true", help="print the summary as JSON")
    maintain = commands.add_parser(
        "maintain", help="compact small files, expire old snapshots, remove orphan files (no writer may run)"
    )
    maintain.add_argument(
        "--table", action="append", default=[], help="only this sink table (ns.table); repeat"
    )
    maintain.add_argument(
        "--expire-older-than", type=_duration, default="7d", help="snapshot age (default 7d)"
    )
    maintain.add_argument(
        "--orphans-older-than", type=_duration, default="3d", help="orphan age (default 3d)"
    )
    maintain.add_argument("--json", action="store_true", help="print the reports as JSON")
    return parser


def _duration(text: str) -> dt.timedelta:
    """``7d``, ``12h``, ``30m``, ``45s`` or ``0``."""
    match = re.fullmatch(r"\s*(\d+)\s*([dhms]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"`{text}` is not a duration: write e.g. 7d, 12h, 30m, 45s or 0")
    unit = {"d": "days", "h": "hours", "m": "minutes", "s": "seconds", "": "seconds"}[match.group(2)]
    return dt.timedelta(**{unit: int(match.group(1))})


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``binlake`` console script; returns the exit code."""
    args = _parser().parse_args(argv)
    setup_logging(args.log_level)
    try:
        if args.command == "validate":
            return _validate(args.config, as_json=args.json)
        if args.command == "plan":
            return _plan(_load(args.config), as_json=args.json, replan=args.replan)
        if args.command == "maintain":
            return _maintain(_load(args.config), args)
        if args.command == "snapshot":
            return _snapshot(_load(args.config), args)
        if args.command == "stream":
            return _stream(_load(args.config), args)
        if args.command == "backfill":
            return _backfill(_load(args.config), args)
        if args.command == "quality":
            return _quality(_load(args.config), args)
        if args.command == "status":
            return _status(_load(args.config), as_json=args.json)
    except BinlakeError as e:
        print(f"binlake {args.command}: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print(f"binlake {args.command}: interrupted", file=sys.stderr)
        return 130
    raise AssertionError(f"unhandled command {args.command}")  # argparse restricts the choices


def _load(path: str | None) -> PipelineConfig:
    if not path:
        raise ConfigError("no pipeline config given: pass `--config FILE` or set BINLAKE_CONFIG")
    config = load_config(path)
    for secret in config.secrets():
        register_secret(secret)
    return config


def _validate(path: str | None, as_json: bool) -> int:
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
    if as_json:
        print(json.dumps({"ok": not failed, "checks": [c.as_dict() for c in checks]}, indent=2))
    else:
        _print_checks(checks)
    return EXIT_CHECKS_FAILED if failed else EXIT_OK


def _print_checks(checks: list[Check]) -> None:
    width = max(len(c.name) for c in checks)
    for check in checks:
        print(f"{check.status:<8} {check.name:<{width}}  {check.message}")
        if check.fix:
            print(f"{'':<8} {'':<{width}}  fix: {check.fix}")
    errors = sum(c.status == "error" for c in checks)
    warnings = sum(c.status == "warning" for c in checks)
    if errors:
        print(f"FAILED: {errors} error(s), {warnings} warning(s); fix the errors above and run again")
    else:
        print(f"OK: all checks passed ({warnings} warning(s))")


def _plan(config: PipelineConfig, as_json: bool, replan: bool) -> int:
    from binlake.planner import plan

    plans = plan(
        config, replan=replan, progress=lambda t, n: log.info("splitting %s: %d chunks so far", t, n)
    )
    rows: list[dict[str, Any]] = [
        {
            "table": p.table.name,
            "key_column": p.key_column,
            "strategy": p.strategy,
            "reason": p.reason,
            "chunks": len(p.chunks),
            "finished_chunks": p.finished,
            "min_key": _show(p.min_key),
            "max_key": _show(p.max_key),
            "estimated_rows": p.estimated_rows,
        }
        for p in plans
    ]
    if as_json:
        print(json.dumps({"pipeline": config.pipeline.name, "tables": rows}, indent=2))
        return EXIT_OK
    width = max([len(r["table"]) for r in rows] + [5])
    print(f"{'table':<{width}}  {'split':<7} {'chunks':>7} {'done':>5}  {'est. rows':>11}  key range")
    for r in rows:
        print(
            f"{r['table']:<{width}}  {r['strategy']:<7} {r['chunks']:>7} {r['finished_chunks']:>5}  "
            f"{r['estimated_rows']:>11,}  `{r['key_column']}` {r['min_key']} … {r['max_key']}"
        )
        print(f"{'':<{width}}  why: {r['reason']}")
    total = sum(r["chunks"] for r in rows)
    print(f"{len(rows)} tables, {total} chunks, plan stored in {config.pipeline.resolved_state_uri}")
    return EXIT_OK


def _snapshot(config: PipelineConfig, args: argparse.Namespace) -> int:
    from binlake.events import TableId
    from binlake.planner import plan
    from binlake.sink.catalog import sink_name
    from binlake.snapshot.progress import print_progress
    from binlake.spark.session import spark_session
    from binlake.spark.snapshot_job import run_snapshot

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
        _print_where(config, sorted({sink_name(config, TableId.parse(t)) for t in report.tables}))
    print(json.dumps(summary))  # the last line: what an Airflow task pushes to XCom
    return EXIT_OK


def _stream(config: PipelineConfig, args: argparse.Namespace) -> int:
    from binlake.spark.session import spark_session
    from binlake.spark.stream_job import print_batch, run_stream

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


def _backfill(config: PipelineConfig, args: argparse.Namespace) -> int:
    from binlake.backfill.plan import KeyRange, new_backfill_id, plan_backfill
    from binlake.backfill.progress import print_progress
    from binlake.backfill.wait import wait_applied
    from binlake.spark.backfill_job import run_backfill
    from binlake.spark.session import spark_session

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
        units = wait_applied(config, backfill_id, args.timeout, progress=_print_units)
        summary["applied"] = len(units)
        if not args.json:
            print(f"backfill `{backfill_id}`: all {len(units)} units applied by the stream")
    print(json.dumps(summary))
    return EXIT_OK


def _print_units(counts: dict[str, int]) -> None:
    print(
        "backfill units: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())),
        file=sys.stderr,
    )


def _quality(config: PipelineConfig, args: argparse.Namespace) -> int:
    from binlake.quality.checkpoint import print_quality, run_quality

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


def _print_where(config: PipelineConfig, tables: list[str]) -> None:
    from binlake.sink.catalog import catalog_name

    example = tables[0] if tables else "<namespace>.<table>"
    print(f"Iceberg tables: {', '.join(tables)}")
    print(f"catalog: {config.catalog_uri}\nwarehouse: {config.warehouse}")
    print(
        "query them from Python:\n"
        "  from pyiceberg.catalog.sql import SqlCatalog\n"
        f"  catalog = SqlCatalog('{catalog_name(config)}', uri='{config.catalog_uri}', "
        f"warehouse='{config.warehouse}')\n"
        f"  catalog.load_table('{example}').scan().to_pandas()\n"
        f"  catalog.load_table('{example}').scan().to_duckdb('{example.split('.')[-1]}')"
        f".sql('SELECT COUNT(*) FROM {example.split('.')[-1]}').show()"
    )


def _status(config: PipelineConfig, as_json: bool) -> int:
    from binlake.state.offset_names import SWITCH
    from binlake.state.store import StateStore

    store = StateStore(config.pipeline.resolved_state_uri)
    plans = store.plans(config.pipeline.name).load()
    switch = store.offsets(config.pipeline.name).load(SWITCH)
    stream = _stream_status(store, config.pipeline.name)
    changes = _schema_change_status(store, config.pipeline.name)
    quality = _quality_status(store, config.pipeline.name)
    backfills = _backfill_status(store, config.pipeline.name)
    tables: list[dict[str, Any]] = [
        {
            "table": p.table.name,
            "strategy": p.strategy,
            "chunks": len(p.chunks),
            "finished_chunks": p.finished,
            "rows": sum(c.row_count or 0 for c in p.chunks),
            "max_high_watermark": str(
                max((c.high_watermark for c in p.chunks if c.high_watermark), default="")
            ),
        }
        for p in plans
    ]
    if as_json:
        print(json.dumps({"pipeline": config.pipeline.name, "tables": tables,
                          "switch_offset": switch.to_dict() if switch else None, "stream": stream,
                          "schema_changes": changes, "quality": quality, "backfills": backfills},
                         indent=2))  # fmt: skip
        return EXIT_OK
    if stream:
        print(_stream_line(stream))
    for change in changes:
        note = f" ({change['message']})" if change["message"] else ""
        print(f"schema change at {change['offset']}: {change['change']}: {change['status']}{note}")
    if quality:
        verdict = "all expectations met" if quality["success"] else f"FAILED: {', '.join(quality['failed'])}"
        print(
            f"quality: run {quality['run_name']} at {quality['checked_at']}: {verdict} ({quality['report']})"
        )
    for b in backfills:
        units = ", ".join(f"{n} {status}" for status, n in sorted(b["units"].items()))
        print(f"backfill {b['backfill_id']} ({', '.join(b['tables'])}): {units}; {b['rows']:,} rows staged")
    if not plans:
        print(f"pipeline `{config.pipeline.name}`: nothing planned yet (run `binlake plan`)")
        return EXIT_OK
    width = max(len(t["table"]) for t in tables)
    print(f"{'table':<{width}}  {'chunks':>13}  {'rows':>11}  max high watermark")
    for t in tables:
        done = f"{t['finished_chunks']}/{t['chunks']}"
        print(f"{t['table']:<{width}}  {done:>13}  {t['rows']:>11,}  {t['max_high_watermark'] or '-'}")
    print(f"stream start (switch) offset: {switch or 'not yet: the snapshot is unfinished'}")
    return EXIT_OK


def _stream_status(store: Any, pipeline: str) -> dict[str, Any] | None:
    """The stream's offset, last batch, lag, and the last time it looked at the source."""
    from binlake.state.offset_names import STREAM
    from binlake.stream.positions import HEAD

    applied = store.offsets(pipeline).load_record(STREAM)
    if applied is None:
        return None
    head = store.offsets(pipeline).load_record(HEAD)
    batches = store.stream_history(pipeline).batches(limit=1)
    last = batches[0] if batches else None
    caught_up = head is not None and head[0] <= applied[0]
    return {
        "offset": applied[0].to_dict(),
        "applied_at": applied[1].isoformat(),
        "source_head": head[0].to_dict() if head else None,
        "source_checked_at": head[1].isoformat() if head else None,
        "caught_up": caught_up,
        "last_batch": {
            "batch_id": last.batch_id,
            "rows": last.rows,
            "changes": last.changes,
            "seconds": round(last.seconds, 3),
            "lag_s": last.lag_s,
            "finished_at": last.finished_at.isoformat(),
        }
        if last
        else None,
    }


def _schema_change_status(store: Any, pipeline: str, last: int = 5) -> list[dict[str, Any]]:
    """The pending schema changes and the last few others, oldest first."""
    from binlake.events import describe_change

    requests = store.schema_requests(pipeline).all()
    shown = [r for r in requests if r.status == "pending"] or requests[-last:]
    return [
        {
            "offset": f"{r.offset.file}:{r.offset.pos}",
            "change": describe_change(r.change),
            "behavior": r.behavior,
            "status": r.status,
            "message": r.message,
        }
        for r in shown
    ]


def _quality_status(store: Any, pipeline: str) -> dict[str, Any] | None:
    """The newest quality run: when, which tables failed, where its report is."""
    results = store.quality(pipeline).results()
    if not results:
        return None
    newest = results[0].run_name
    run = [r for r in results if r.run_name == newest]
    page = next((r.report for r in run if r.report), None)
    return {
        "run_name": newest,
        "checked_at": max(r.checked_at for r in run).isoformat(timespec="seconds"),
        "success": all(r.success for r in run),
        "failed": sorted(r.table for r in run if not r.success),
        "tables": len(run),
        # a table's page lies under <report folder>/validations/: the run's index is beside it
        "report": f"{page.split('/validations/')[0]}/index.html" if page else None,
    }


def _backfill_status(store: Any, pipeline: str, last: int = 5) -> list[dict[str, Any]]:
    """The last few backfills: their tables and how many units are pending, staged, applied, stale."""
    from binlake.backfill.progress import unit_counts
    from binlake.state.backfills import BackfillLedger

    by_id: dict[str, list[Any]] = {}
    for unit in BackfillLedger(store).units(pipeline):
        by_id.setdefault(unit.backfill_id, []).append(unit)
    return [
        {
            "backfill_id": backfill_id,
            "tables": sorted({u.table.name for u in units}),
            "units": unit_counts(units),
            "rows": sum(u.rows for u in units),
        }
        for backfill_id, units in list(by_id.items())[-last:]
    ]


def _stream_line(stream: dict[str, Any]) -> str:
    offset = f"{stream['offset']['file']}:{stream['offset']['pos']}"
    last = stream["last_batch"]
    if stream["caught_up"]:
        lag = "caught up"
    elif last and last["lag_s"] is not None:
        lag = f"lag {last['lag_s']:.1f} s"
    else:
        lag = "behind"
    seen = f", source last checked {stream['source_checked_at']}" if stream["source_checked_at"] else ""
    batch = (
        f"; last batch {last['batch_id']}: {last['rows']:,} changes at {last['finished_at']}" if last else ""
    )
    return f"stream: applied up to {offset} ({lag}{seen}){batch}"


def _maintain(config: PipelineConfig, args: argparse.Namespace) -> int:
    from binlake.sink.catalog import open_catalog, sink_name
    from binlake.sink.maintenance import MaintenanceOptions, maintain
    from binlake.state.store import StateStore

    store = StateStore(config.pipeline.resolved_state_uri)
    plans = {sink_name(config, p.table): p for p in store.plans(config.pipeline.name).load()}
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
    options = MaintenanceOptions(args.expire_older_than, args.orphans_older_than)
    catalog = open_catalog(config)
    reports = []
    for identifier in args.table or sorted(plans):
        if not catalog.table_exists(identifier):
            log.warning("%s has no Iceberg table yet: skipped", identifier)
            continue
        reports.append(maintain(catalog, store, config.pipeline.name, identifier, plans[identifier], options))
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
    for r in [] if args.json else reports:
        print(
            f"{r.table}: {r.files_compacted} small files compacted into {r.files_written}, "
            f"{r.snapshots_expired} snapshots expired, {r.orphans_removed} orphan files removed "
            f"({r.orphan_bytes:,} bytes) in {r.seconds:.1f} s"
        )
    return EXIT_OK


def _show(value: object) -> str:
    """A key value for people (and JSON): bytes in hex, everything else as text."""
    if value is None:
        return "∅"
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
