"""Iceberg commits fenced by the writer lease (``state/fencing.py``): a writer that lost its lease
can never commit to a sink table again.

Every commit of a catalog binlake opens passes here (``open_catalog``). While this process is a
pipeline's writer for a command, the commit first asks the state store whether the lease is still
its own, then carries the command's epoch in the table's properties
(``binlake.writer-epoch.<command>``) with a requirement that the table's current epoch is not
higher: the catalog checks it against the table as it is at the commit (SQL catalogs atomically,
in the same conditional update that detects any concurrent commit). So even a writer paused
between its check and its commit cannot commit after a newer writer did. (Only for the commands
of which one run writes at a time, ``EXCLUSIVE``.)
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import Field
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.update import (
    SetPropertiesUpdate,
    TableRequirement,
    TableUpdate,
    ValidatableTableRequirement,
)

from binlake.state import fencing
from binlake.state.fencing import Fence
from binlake.state.leases import Command
from binlake.state.writers import FencedError

#: The table property holding the epoch of the last writer of a command (``…stream``, ``…snapshot``).
EPOCH_KEY = "binlake.writer-epoch."


#: Commands of which one run writes a pipeline's tables at a time: their epoch goes in the table.
#: (Runs of a snapshot's chunk groups write side by side: their commits are fenced by the state
#: store's check, and made idempotent by the chunk ids in each commit, ``sink/exactly_once.py``.)
EXCLUSIVE = (Command.STREAM, Command.MAINTAIN)


def epoch_key(command: str) -> str:
    return EPOCH_KEY + command.removeprefix("binlake ").replace(" ", "-")


class AssertWriterEpoch(ValidatableTableRequirement):
    """The table's epoch for the command is at most this writer's (no newer writer committed)."""

    type: Literal["assert-binlake-writer-epoch"] = Field(default="assert-binlake-writer-epoch")
    key: str
    epoch: int
    command: str

    def validate(self, base_metadata: TableMetadata | None) -> None:  # type: ignore[override]
        found = int((base_metadata.properties if base_metadata else {}).get(self.key, 0))
        if found > self.epoch:
            raise FencedError(
                f"This `{self.command}` (epoch {self.epoch}) may no longer commit: a newer writer (epoch "
                f"{found}) has committed to the table since. Nothing more is written by this process. "
                "Fix: none needed if the other writer runs; otherwise start the command again."
            )


def fence_commits(catalog: Catalog, pipeline: str) -> Catalog:
    """Make ``catalog``'s commits fenced by this process's writer lease of ``pipeline``, whenever
    one is held (see the module docstring); returns ``catalog``."""
    commit = catalog.commit_table

    @functools.wraps(commit)
    def fenced(
        table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> Any:
        fence = fencing.active(pipeline)
        if fence is not None:
            fence.check()
            if fence.command in EXCLUSIVE:
                requirements, updates = _with_epoch(fence, table, requirements, updates)
        return commit(table, requirements, updates)

    catalog.commit_table = fenced  # type: ignore[method-assign]
    return catalog


def _with_epoch(
    fence: Fence, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
) -> tuple[tuple[TableRequirement, ...], tuple[TableUpdate, ...]]:
    key = epoch_key(fence.command)
    assertion = AssertWriterEpoch(key=key, epoch=fence.epoch, command=fence.command)
    updates = (*updates, SetPropertiesUpdate(updates={key: str(fence.epoch)}))
    if _is_sql(table.catalog):
        return (*requirements, assertion), updates  # type: ignore[arg-type]
    # Other catalogs get requirements of the REST spec's kinds only: checked here, just before.
    assertion.validate(table.catalog.load_table(table.name()).metadata)
    return requirements, updates


def _is_sql(catalog: Catalog) -> bool:
    from pyiceberg.catalog.sql import SqlCatalog

    return isinstance(catalog, SqlCatalog)
