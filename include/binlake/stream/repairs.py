"""What the stream does where the binlog holds a change it cannot replicate (a ``Gap``).

Per gap of table T at position p, in order:

1. T is under an open repair already (``state.repair_ledger``): nothing more — its changes are held
   back until the repair's backfill is applied.
2. The snapshot holds it: every chunk of T was read after p (``SnapshotFilter.holds``).
3. A backfill of all of T, read after p, is staged: a repair opens; from p on the stream applies
   none of T's changes until it applies that backfill's units (the table stays as it was before
   p: behind, never wrong), which closes the repair.
4. Otherwise, healing (``stream.on_gap: backfill``, the default): a repair opens for a backfill
   of T that does not exist yet (``heal_id``); the stream's healer (``spark/healer.py``) reads it —
   after p, since p is behind the stream — and the stream applies it like any other, which closes
   the repair. T waits meanwhile; no other table does.
5. With ``stream.on_gap: stop`` (or a cascading foreign key, which no backfill repairs while it
   lasts), the stream stops, before committing anything of the batch, with what it met, where,
   and the fix (make the application log what binlake needs, then backfill the table).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence

from binlake.errors import BinlakeError
from binlake.events import TableId
from binlake.offsets import BinlogOffset
from binlake.source.binlog.event_rows import Gap, gap_message
from binlake.source.chunks.splitter import ChunkRange
from binlake.state.backfills import BackfillLedger, BackfillUnit
from binlake.state.repair_ledger import RepairLedger
from binlake.stream.emit_filter import SnapshotFilter

log = logging.getLogger(__name__)


class UnreplicableChangeError(BinlakeError):
    """The stream met a change it cannot replicate, and no backfill covers it yet."""

    def __init__(self, message: str, gap: Gap) -> None:
        self.gap = gap
        super().__init__(message)


class StreamRepairs:
    """Gaps met by the stream, and the repairs that hold tables back (see the module docstring)."""

    def __init__(
        self,
        pipeline: str,
        repairs: RepairLedger,
        backfills: BackfillLedger,
        snapshot: SnapshotFilter | None,
        cascades: Callable[[TableId], bool] = lambda _: False,
        heal: bool = False,
    ) -> None:
        self.pipeline = pipeline
        self.repairs = repairs
        self.backfills = backfills
        self.snapshot = snapshot
        self.cascades = cascades
        """Whether a table has a cascading foreign key now (no backfill repairs it while it has)."""
        self.heal = heal
        """Whether a gap nothing covers opens a repair the stream's healer backfills (``on_gap``)."""

    def held(self) -> dict[str, BinlogOffset]:
        """Tables held back by an open repair → from where."""
        held: dict[str, BinlogOffset] = {}
        for repair in self.repairs.repairs(status="open"):
            name = repair.table.name
            held[name] = min(held.get(name, repair.offset), repair.offset)
        return held

    def meet(self, gaps: Sequence[Gap]) -> dict[str, BinlogOffset]:
        """Decide about a batch's gaps (see the module docstring); returns the tables held back
        from now on and from where. Raises ``UnreplicableChangeError`` for a gap nothing covers."""
        held = self.held()
        for gap in gaps:
            name = gap.table.name
            if name in held and held[name] <= gap.offset:
                continue
            if self.snapshot is not None and self.snapshot.holds(name, gap.offset.packed):
                log.info("%s at %s: the snapshot read the table after it", name, gap.offset)
                continue
            cascades = self.cascades(gap.table)
            backfill = None if cascades else self._covering(gap.table, gap.offset)
            if backfill is None and self.heal and not cascades:
                backfill = heal_id(gap.table, gap.offset)
                log.warning(
                    "%s: a change binlake cannot replicate at %s (%s): the table waits while backfill "
                    "`%s` reads it again (`stream.on_gap: backfill`); other tables go on",
                    name, gap.offset, gap.reason, backfill,
                )  # fmt: skip
            if backfill is None:
                raise UnreplicableChangeError(
                    gap_message(
                        gap,
                        " The stream stops here; nothing of the batch that holds it was written (every "
                        "sink table stays as the last batch left it, which was exact).",
                    ),
                    gap,
                )
            self.repairs.open(gap.table, gap.offset, gap.reason, backfill)
            log.warning(
                "%s: a change binlake cannot replicate at %s (%s); backfill `%s` read the table after it: "
                "the table's changes wait until the stream applies it",
                name, gap.offset, gap.reason, backfill,
            )  # fmt: skip
            held[name] = gap.offset
        return held

    def healing(self) -> list[TableId]:
        """Tables held by an open repair that heals itself (its backfill read by the stream)."""
        return [r.table for r in self.repairs.repairs(status="open") if r.backfill_id.startswith(HEAL_PREFIX)]

    def unread_heals(self) -> list[tuple[TableId, str]]:
        """Open repairs waiting for a backfill the healer reads (table, backfill id): none of its
        units staged or applied yet, or some still to read."""
        waiting: list[tuple[TableId, str]] = []
        for repair in self.repairs.repairs(status="open"):
            if not repair.backfill_id.startswith(HEAL_PREFIX):
                continue
            units = self.backfills.units(self.pipeline, repair.backfill_id)
            if not units or any(u.status == "pending" for u in units):
                waiting.append((repair.table, repair.backfill_id))
        return waiting

    def _covering(self, table: TableId, offset: BinlogOffset) -> str | None:
        """A staged (or applied) backfill of the whole table whose every chunk was read after
        ``offset``; its id."""
        by_backfill: dict[str, list[BackfillUnit]] = {}
        for unit in self.backfills.units(self.pipeline, statuses=["pending", "staged", "applied"]):
            if unit.table == table:
                by_backfill.setdefault(unit.backfill_id, []).append(unit)
        for backfill_id, units in by_backfill.items():
            chunks = [c for u in units for c in u.chunks]
            staged = all(u.status in ("staged", "applied") for u in units)
            after = all(c.low is not None and c.low >= offset for c in chunks)
            if staged and after and _whole_table([c.range for c in chunks]):
                return backfill_id
        return None

    def applied(self, units: Sequence[BackfillUnit]) -> None:
        """Units the stream applied: the repairs they complete close."""
        by_table: dict[TableId, set[str]] = {}
        for unit in units:
            by_table.setdefault(unit.table, set()).add(unit.backfill_id)
        for table, ids in by_table.items():
            for repair in self.repairs.close(table, sorted(ids)):
                log.info("%s: repair from %s closed: backfill `%s` applied",
                         table, repair.offset, repair.backfill_id)  # fmt: skip


HEAL_PREFIX = "heal-"


def heal_id(table: TableId, offset: BinlogOffset) -> str:
    """The id of the backfill that heals ``table``'s gap at ``offset`` (one per gap: a replayed
    batch finds the same)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in table.name)
    return f"{HEAL_PREFIX}{safe}-{offset.file}-{offset.pos}"


def _whole_table(ranges: Sequence[ChunkRange]) -> bool:
    """Whether chunk ranges cover every key: one unbounded start, one unbounded end, each end the
    next one's start."""
    ordered = sorted(ranges, key=lambda r: (r.start is not None, r.start))
    if not ordered or ordered[0].start is not None or ordered[-1].end is not None:
        return False
    return all(a.end == b.start for a, b in itertools.pairwise(ordered))
