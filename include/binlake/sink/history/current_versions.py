"""Which version of each key is current in a history table (``sink/history/scd2.py``), and since
when: key → the version's ``__opened_order__``, ``__opened_position__`` and ``__valid_from__``.

A history batch closes the current version of each key it changes: it writes the version again,
closed, in place of the stored one — its values, its identity (the key and the change that opened
it) and when it began. The values are the before image of the key's first change in the batch: the
binlog's full image of the row as it stood from the change that opened the version to this one,
which is what the version holds. The rest is here. So a batch reads nothing of the table, and its
cost follows the batch, not the table (``bench/changelog.py``).

Where a before image does not hold the version's values, the batch reads the stored version instead
(``HistoryWriter``): a key whose first change carries no before image (an insert over a version the
table still holds), and a version *held*: one with a value in a column the source no longer fills
(a dropped column the history keeps), found when the index is built.

A sorted run of keys (``sink/keys/run_index.py``), never the truth: it describes one snapshot of the
table and is rebuilt from the table's current versions otherwise (their key and metadata columns,
once). Compaction and manifest merges change no version, so the index follows them (each such
snapshot marked by its ``binlake.operation``) instead of being rebuilt. A key with two current
versions means the table is not what binlake wrote: the index is not built, and batches read the
stored versions until a backfill repairs the key.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from binlake.sink.column_fill import OPERATION
from binlake.sink.history.scd2 import CURRENT, OPENED, OPENED_ORDER, VALID_FROM
from binlake.sink.keys.key_index_store import concat, distinct
from binlake.sink.keys.run_index import RunIndex

log = logging.getLogger(__name__)

#: A key's record: its current version's opening change (order -1: the key has no current version),
#: when it began (microseconds; ``_NO_TIME`` for none), and whether it holds values the source no
#: longer gives.
VERSION = np.dtype([("order", "<i4"), ("opened", "<i8"), ("valid_from", "<i8"), ("held", "u1")])
_NO_TIME = np.iinfo(np.int64).min
#: Commits that move rows between files and change none (``sink/compaction.py``).
_ROW_PRESERVING = {"compact", "merge-manifests"}


class CurrentVersions(RunIndex):
    """The current versions of one history table (see the module docstring)."""

    FORMAT = "1"
    VALUES = VERSION

    def ready(self, table: Table, unfilled: Sequence[str]) -> bool:
        """Whether the index describes ``table``'s current snapshot (rebuilt if not; ``unfilled``:
        the history's columns the source does not fill, whose values make a version held). False
        where a key has two current versions."""
        wanted = self.identity(table, unfilled=",".join(sorted(unfilled)))
        return self._follows(table, wanted) or self._rebuild(table, list(unfilled), wanted)

    def versions(self, keys: pa.Table) -> np.ndarray:
        """The record of each of ``keys`` (the key columns), in their order."""
        encoded = self._encode(keys)
        unique, inverse = np.unique(encoded, return_inverse=True)
        return self._lookup(unique)[inverse]

    def apply(self, table: Table, keys: pa.Table, current: pa.Table, before: int | None) -> None:
        """After a batch's commit on the snapshot ``before``: the keys it changed (``keys``) have
        the versions ``current`` (history rows, current ones) or none; the index describes the new
        snapshot, if it described ``before`` (else it is left to be rebuilt)."""
        if not self._described(before) or self._identity is None:
            return
        put = self._sorted(self._encode(current), records(current, ()))
        if len(np.flatnonzero(put.keys[1:] == put.keys[:-1])):
            log.warning(
                "a batch of %s opened two current versions of a key: rebuilding its index", table.name()
            )
            self.forget()
            return
        after = self.identity(table, unfilled=self._identity["unfilled"])
        gone = distinct(self._encode(keys))
        self._record({"before": self._identity, "after": after}, gone, put.keys, put.values)

    def _follows(self, table: Table, wanted: dict[str, str]) -> bool:
        """Whether the index describes ``wanted``, or a snapshot that ``wanted``'s follows through
        row-preserving commits alone (then it describes ``wanted`` from now on)."""
        have = self._identity
        if have is None:
            return False
        if have == wanted:
            return True
        if {k: v for k, v in have.items() if k != "snapshot"} != {
            k: v for k, v in wanted.items() if k != "snapshot"
        }:
            return False
        snapshot = table.current_snapshot()
        while snapshot is not None and str(snapshot.snapshot_id) != have["snapshot"]:
            summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
            if summary.get(OPERATION) not in _ROW_PRESERVING or snapshot.parent_snapshot_id is None:
                return False
            snapshot = table.snapshot_by_id(snapshot.parent_snapshot_id)
        if snapshot is None:
            return False
        nothing = np.empty(0, self._dtype)
        self._record({"before": have, "after": wanted}, nothing, nothing, np.empty(0, VERSION))
        return True

    def _rebuild(self, table: Table, unfilled: list[str], identity: dict[str, str]) -> bool:
        started = time.monotonic()
        self._start(identity)
        self._identity = None  # until the build is written: a failed one describes nothing
        keys, values = [], []
        if table.current_snapshot() is not None:
            columns = (*self.key_columns, CURRENT, OPENED, OPENED_ORDER, VALID_FROM, *unfilled)
            scan = table.scan(row_filter=f"{CURRENT} == True", selected_fields=columns)
            for batch in scan.to_arrow_batch_reader():
                part = pa.Table.from_batches([batch])
                keys.append(self._encode(part))
                values.append(records(part, unfilled))
        run = self._sorted(concat(keys, self._dtype), concat(values, VERSION))
        if len(np.flatnonzero(run.keys[1:] == run.keys[:-1])):
            log.warning(
                "%s holds a key with two current versions: until a backfill of the key repairs it, its "
                "batches read the current versions of their keys from the table (slower)",
                ".".join(table.name()),
            )
            return False
        self._write_base(run, identity)
        log.info(
            "indexed the current versions of %s: %d in %.2f s (%s)",
            ".".join(table.name()), len(run.keys), time.monotonic() - started, self.path,
        )  # fmt: skip
        return True


def records(rows: pa.Table, unfilled: Sequence[str]) -> np.ndarray:
    """The index's record of each of ``rows`` (current versions; ``unfilled``: columns whose values
    make a version held)."""
    values = np.empty(rows.num_rows, VERSION)
    values["order"] = _numbers(rows.column(OPENED_ORDER), 0)
    values["opened"] = _numbers(rows.column(OPENED), 0)
    values["valid_from"] = _numbers(rows.column(VALID_FROM).cast(pa.int64()), _NO_TIME)
    held = np.zeros(rows.num_rows, bool)
    for name in unfilled:
        held |= np.asarray(pc.is_valid(rows.column(name)).to_numpy(zero_copy_only=False), bool)
    values["held"] = held
    return values


def valid_from(values: np.ndarray) -> pa.Array:
    """The records' ``__valid_from__`` as the history stores it."""
    times = np.asarray(values["valid_from"], np.int64)
    return pa.array(times, pa.int64(), mask=times == _NO_TIME).cast(pa.timestamp("us", "UTC"))


def _numbers(column: Any, null: int) -> np.ndarray:
    return np.asarray(pc.fill_null(column, null).to_numpy(zero_copy_only=False), np.int64)
