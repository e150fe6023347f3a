"""Where a micro-batch's time goes: seconds per phase (reading the batch's rows, following schema
changes, preparing each table's rows, each sink table's commit, the state store), logged at INFO
after each batch so a user can see which part of a slow batch to look at."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager


class BatchClock:
    """Seconds spent per phase of one batch, in the order the phases first ran."""

    def __init__(self) -> None:
        self.spent: dict[str, float] = {}

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        started = time.monotonic()
        try:
            yield
        finally:
            self.spent[name] = self.spent.get(name, 0.0) + time.monotonic() - started

    def summary(self) -> str:
        """``read 0.12 s, prepare 0.30 s, commit db.t 0.41 s, …``"""
        return ", ".join(f"{name} {seconds:.2f} s" for name, seconds in self.spent.items())
