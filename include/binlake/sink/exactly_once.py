"""What binlake records in the same Iceberg commit as its data, so a retry after a crash can tell
whether the commit happened: the chunks an append holds (snapshot summary), the last batch id and
the stream's offset (table properties), and the schema the snapshot's chunks were read with."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Literal

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    wait_random_exponential,
)

from binlake.errors import BinlakeError
from binlake.offsets import BinlogOffset

log = logging.getLogger(__name__)

#: Snapshot summary key listing the chunks an append commit holds (JSON).
CHUNKS_KEY = "binlake.chunks"
#: Table property and snapshot summary key of the last merged batch id.
BATCH_KEY = "binlake.batch-id"
#: Table property: the binlog offset up to which the stream has applied this table's changes.
STREAM_OFFSET_KEY = "binlake.stream-offset"
#: Table property: the source schema (JSON) the snapshot's chunks in the table were read with.
SOURCE_SCHEMA_KEY = "binlake.snapshot-schema"
#: Commits of one batch or chunk group tried at most, each after checking it is not in already.
MAX_ATTEMPTS = 5

Outcome = Literal["committed", "skipped"]


class CommitConflictError(BinlakeError):
    """The table kept changing under binlake's commit."""


def conflict_retries(what: str) -> Retrying:
    """The attempts of a commit that may conflict with another writer of the table (maintenance,
    a compaction): each attempt checks first whether the commit is in already; a conflict
    (pyiceberg's ``CommitFailedException``) waits a jittered, growing moment and tries again; after
    ``MAX_ATTEMPTS`` the conflict is raised (callers turn it into ``CommitConflictError``)."""

    def conflicted(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome is not None else None
        log.warning("%s conflicted (%s): checking again", what, error)

    return Retrying(
        retry=retry_if_exception_type(CommitFailedException),
        stop=stop_after_attempt(MAX_ATTEMPTS),
        wait=wait_random_exponential(multiplier=0.05, max=2.0),
        before_sleep=conflicted,
        reraise=True,
    )


class PartialCommitError(BinlakeError):
    """Some, not all, of a file group's chunks are already committed."""


@dataclass(frozen=True)
class ChunkCommit:
    """A chunk whose rows are in the files being committed."""

    chunk_id: str
    high_watermark: BinlogOffset
    rows: int
    low_watermark: BinlogOffset | None = None


@dataclass(frozen=True)
class CommitResult:
    outcome: Outcome
    snapshot_id: int | None
    seconds: float
    attempts: int
    files_added: int = 0
    files_removed: int = 0
    bytes_added: int = 0
    bytes_removed: int = 0


def committed_chunk_commits(table: Table) -> list[ChunkCommit]:
    """Every chunk recorded in the table's snapshot summaries, as committed."""
    return [chunk for snapshot in table.snapshots() for chunk in snapshot_chunks(snapshot)]


def snapshot_chunks(snapshot: Snapshot) -> list[ChunkCommit]:
    """The chunks one snapshot's summary records (none: not a chunk commit)."""
    text = snapshot.summary.additional_properties.get(CHUNKS_KEY) if snapshot.summary else None
    return [
        ChunkCommit(
            entry["id"],
            BinlogOffset.from_dict(entry["high"]),
            int(entry.get("rows", 0)),
            BinlogOffset.from_dict(entry["low"]) if entry.get("low") else None,
        )
        for entry in (json.loads(text) if text else [])
    ]


def chunks_in(table: Table, wanted: set[str], files: int) -> bool:
    """Whether all the ``wanted`` chunks are committed to ``table`` already (none of them: False).

    Raises:
        PartialCommitError: some are and some are not (``files`` hold them all).
    """
    done = wanted & {c.chunk_id for c in committed_chunk_commits(table)}
    if done and done != wanted:
        name = ".".join(table.name())
        raise PartialCommitError(
            f"Cannot commit {files} files to {name}: chunks {chunk_ids(done)} of the group are "
            f"committed already but {chunk_ids(wanted - done)} are not. Fix: delete the group's files "
            "and read its uncommitted chunks again (`binlake snapshot` does)."
        )
    return done == wanted


def chunk_summary(chunks: list[ChunkCommit]) -> dict[str, str]:
    """The snapshot summary of an append commit holding ``chunks``."""
    entries = [
        {
            "id": c.chunk_id,
            "high": c.high_watermark.to_dict(),
            "low": c.low_watermark.to_dict() if c.low_watermark else None,
            "rows": c.rows,
        }
        for c in chunks
    ]
    return {CHUNKS_KEY: json.dumps(entries)}


def last_batch_id(table: Table) -> int | None:
    value = table.properties.get(BATCH_KEY)
    return None if value is None else int(value)


def stream_offset(table: Table) -> BinlogOffset | None:
    """The offset up to which the stream's changes of ``table`` are in it."""
    value = table.properties.get(STREAM_OFFSET_KEY)
    return None if value is None else BinlogOffset.from_dict(json.loads(value))


def batch_properties(batch_id: int, offset: BinlogOffset | None) -> dict[str, str]:
    properties = {BATCH_KEY: str(batch_id)}
    if offset is not None:
        properties[STREAM_OFFSET_KEY] = json.dumps(offset.to_dict())
    return properties


def commit_result(table: Table, outcome: Outcome, started: float, attempts: int) -> CommitResult:
    """What the commit just made did, from the table's current snapshot. No refresh: a commit
    leaves ``table`` at the metadata it wrote (loading it again parsed every snapshot it keeps)."""
    snapshot = table.current_snapshot()
    summary = snapshot.summary.additional_properties if snapshot and snapshot.summary else {}

    def number(key: str) -> int:
        return int(summary.get(key, 0))

    return CommitResult(
        outcome,
        snapshot.snapshot_id if snapshot else None,
        time.monotonic() - started,
        attempts,
        files_added=number("added-data-files"),
        files_removed=number("deleted-data-files"),
        bytes_added=number("added-files-size"),
        bytes_removed=number("removed-files-size"),
    )


def chunk_ids(ids: set[str]) -> str:
    shown = sorted(ids)
    return ", ".join(shown[:5]) + (f" and {len(shown) - 5} more" if len(shown) > 5 else "")
