"""What the sub-commands print for people: aligned tables (rich), the checks, the stream's line."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from rich.console import Console, JustifyMethod
from rich.table import Table
from rich.text import Text

from binlake.config import PipelineConfig
from binlake.source.server.checks import Check

if TYPE_CHECKING:
    from binlake.status import StreamStatus


def print_checks(checks: list[Check]) -> None:
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


def print_table(columns: list[tuple[str, JustifyMethod]], rows: list[list[str]]) -> None:
    """Rows under their column names, aligned, never cut: names of sink tables run long."""
    table = Table(box=None, pad_edge=False, show_edge=False, header_style="", padding=(0, 2, 0, 0))
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))  # Text: a `[` in a name is no markup
    width = sum(max([len(c[0]), *(len(r[i]) for r in rows)]) + 2 for i, c in enumerate(columns))
    console = Console(width=width, highlight=False, markup=False)
    with console.capture() as captured:
        console.print(table)
    print("\n".join(line.rstrip() for line in captured.get().splitlines()))


def stream_line(stream: StreamStatus) -> str:
    offset = f"{stream.offset['file']}:{stream.offset['pos']}"
    last = stream.last_batch
    if stream.caught_up:
        lag = "caught up"
    elif stream.lag_s is not None:
        lag = f"lag {stream.lag_s:.1f} s"
    else:
        lag = "behind"
    seen = f", source last checked {stream.source_checked_at}" if stream.source_checked_at else ""
    batch = f"; last batch {last.batch_id}: {last.rows:,} changes at {last.finished_at}" if last else ""
    running = "running" if stream.running else "not running"
    return f"stream ({running}): applied up to {offset} ({lag}{seen}){batch}"


def print_units(counts: dict[str, int]) -> None:
    print(
        "backfill units: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())),
        file=sys.stderr,
    )


def print_verdicts(table: Any) -> None:
    """One table's verification, as it finishes (a ``verify.verification.TableVerification``)."""
    counts = ", ".join(f"{table.count(s)} {s}" for s in ("equal", "drifted", "unverified"))
    line = f"verify {table.table} (sink {table.sink}): {len(table.verdicts)} chunks, {counts}"
    print(line, file=sys.stderr)
    for v in table.verdicts:
        if v.status in ("drifted", "unverified"):
            detail = v.note or f"source {v.source_rows} rows, sink {v.sink_rows} rows at {v.at}"
            print(f"  {v.status} chunk {v.index} {v.range}: {detail}", file=sys.stderr)


def print_where(config: PipelineConfig, tables: list[str]) -> None:
    from binlake.config import display_url

    example = tables[0] if tables else "<namespace>.<table>"
    settings = config.sink.catalog
    uri = display_url(config.catalog_uri) if config.catalog_uri else None  # no password printed
    arguments = [repr(config.catalog_name), f"type={settings.type!r}"]
    arguments += [
        f"{key}={value!r}" for key, value in (("uri", uri), ("warehouse", config.warehouse)) if value
    ]
    print(f"Iceberg tables: {', '.join(tables)}")
    print(f"catalog: {config.catalog_name} ({settings.type}) {uri or ''}")
    print(f"warehouse: {config.warehouse or '-'}")
    print(
        "query them from Python:\n"
        "  from pyiceberg.catalog import load_catalog\n"
        + (
            f"  # add sink.catalog.properties: {', '.join(sorted(settings.properties))}\n"
            if settings.properties
            else ""
        )
        + f"  catalog = load_catalog({', '.join(arguments)})\n"
        f"  catalog.load_table('{example}').scan().to_pandas()\n"
        f"  catalog.load_table('{example}').scan().to_duckdb('{example.split('.')[-1]}')"
        f".sql('SELECT COUNT(*) FROM {example.split('.')[-1]}').show()"
    )


def show(value: object) -> str:
    """A key value for people (and JSON): bytes in hex, everything else as text."""
    if value is None:
        return "∅"
    if isinstance(value, bytes | bytearray):
        return "0x" + bytes(value).hex()
    return str(value)
