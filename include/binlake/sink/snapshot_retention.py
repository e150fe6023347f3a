"""How many snapshots a streamed table keeps: the stream expires the oldest beyond ``keep``.

A stream commits every few seconds (a trigger of 5 s makes 17,000 snapshots a day) and an Iceberg
table's metadata file holds every snapshot with its summary. pyiceberg reads, copies and rewrites
that file on every commit, so with all snapshots kept each batch's commit costs more than the last
(``bench/merge.py --growth``: 0.05 s more per commit after 120 snapshots, seconds after a day).
Flink's Iceberg sink leaves this to a scheduled expire job and Hudi's cleaner keeps 10 commits;
binlake expires in the stream, keeping the newest ``keep`` snapshots (time travel that far back),
and `binlake maintain` remains for age-based expiry and for the files no snapshot references.

Snapshots whose summary records snapshot or backfill chunks (``exactly_once.CHUNKS_KEY``) are
never expired here: a resumed snapshot or backfill recognises its committed chunks from them.
Expiry runs in bulk, once a quarter more than ``keep`` have piled up, so it costs one extra commit
per ``keep / 4`` batches, not one per batch. Best effort: a conflict leaves it for a later batch.
"""

from __future__ import annotations

import logging

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.update.snapshot import ExpireSnapshots

from binlake.sink.exactly_once import CHUNKS_KEY
from binlake.sink.pyiceberg_internals import transaction

log = logging.getLogger(__name__)


def expirable(table: Table, keep: int) -> list[int]:
    """Ids of the snapshots to expire now so that ``keep`` remain besides chunk records and refs
    (none until a quarter more than ``keep`` have piled up)."""
    protected = {ref.snapshot_id for ref in table.metadata.refs.values()}
    candidates = [
        s
        for s in sorted(table.snapshots(), key=lambda s: (s.sequence_number, s.timestamp_ms))
        if s.snapshot_id not in protected
        and not (s.summary is not None and CHUNKS_KEY in s.summary.additional_properties)
    ]
    if len(candidates) + 1 <= keep + max(1, keep // 4):  # + 1: the current snapshot (a ref)
        return []
    return [s.snapshot_id for s in candidates[: max(0, len(candidates) + 1 - keep)]]


def expire(table: Table, keep: int) -> int:
    """Expire the table's oldest snapshots beyond ``keep`` if due; how many were expired."""
    ids = expirable(table, keep)
    if not ids:
        return 0
    try:
        # pyiceberg's expire, in binlake's transaction: pyiceberg's own copies the metadata once
        # per snapshot expired (1.3 s for 25 of 125 snapshots).
        with transaction(table) as tx:
            ExpireSnapshots(tx).by_ids(ids).commit()
    except CommitFailedException as e:
        log.info("expiring snapshots of %s conflicted (%s): left for a later batch", table.name(), e)
        return 0
    log.info("expired %d snapshots of %s (keeping %d)", len(ids), ".".join(table.name()), keep)
    return len(ids)
