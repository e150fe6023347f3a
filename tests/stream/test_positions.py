"""Planning a micro-batch scans its binlog range once: admission, statements and cuts share it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from binlake.config import SourceConfig
from binlake.offsets import BinlogOffset
from binlake.source.binlog.scan import Boundary
from binlake.stream.positions import SourcePositions

SIZES = {"b.000001": 10_000}


def off(pos: int) -> BinlogOffset:
    return BinlogOffset("b.000001", pos)


class ScannedPositions(SourcePositions):
    """A binlog of one transaction every 100 bytes and a statement at 2,000; counts its scans."""

    def __init__(self, port: int) -> None:
        settings = {"hostname": "scan.test", "port": port, "username": "u", "tables": ["d.t"]}
        source = SourceConfig.model_validate(settings)
        super().__init__(source, 9, "p", "sqlite://")
        self.scans: list[tuple[BinlogOffset, BinlogOffset]] = []
        self.closed = 0
        self.opened = threading.Event()
        self.go_on = threading.Event()
        self.go_on.set()

    def head(self) -> BinlogOffset:
        return off(9000)

    def sizes(self) -> dict[str, int]:
        return SIZES

    def _boundaries(self, start: BinlogOffset, end: BinlogOffset) -> Any:
        self.scans.append((start, end))
        return self._scan(start, end)

    def _scan(self, start: BinlogOffset, end: BinlogOffset) -> Iterator[Boundary]:
        self.opened.set()
        self.go_on.wait(10)
        try:
            for pos in range(start.pos + 100, end.pos + 1, 100):
                yield Boundary(off(pos), 0, None, "ALTER TABLE t ADD c INT" if pos == 2000 else None, "d")
        finally:
            self.closed += 1


def test_admission_scan_serves_the_batch_statements_and_cuts() -> None:
    positions = ScannedPositions(1)
    admitted = positions.admit(off(0), off(9000), 2500)
    assert admitted == off(2500)
    assert positions.closed == 1  # the scan stopped at the admitted boundary and its reader closed
    statements = list(positions.statements(off(0), admitted))
    assert [(before, b.offset) for before, b in statements] == [(off(1900), off(2000))]
    cuts = positions.cut(off(0), admitted, 5)
    assert len(cuts) == 5
    assert (cuts[0][0], cuts[-1][1]) == (off(0), admitted)
    assert positions.scans == [(off(0), off(9000))]  # one scan for all three


def test_a_range_past_the_admitted_one_is_scanned_again() -> None:
    positions = ScannedPositions(2)
    admitted = positions.admit(off(0), off(9000), 2500)
    assert admitted is not None
    assert [b.offset for _, b in positions.statements(off(0), off(3000))] == [off(2000)]
    assert positions.scans == [(off(0), off(9000)), (off(0), off(3000))]


def test_a_range_within_the_budget_is_not_scanned_to_admit_it() -> None:
    positions = ScannedPositions(3)
    assert positions.admit(off(0), off(2000), 2500) is None
    assert positions.scans == []


def test_the_next_batch_is_admitted_from_the_scan_ahead() -> None:
    positions = ScannedPositions(4)
    assert positions.admit(off(0), off(9000), 2500) == off(2500)
    positions.go_on.clear()  # the scan ahead is still running when the next batch is planned
    positions.admit_ahead(off(2500), None, 2500)
    assert positions.opened.wait(10)
    threading.Timer(0.2, positions.go_on.set).start()
    assert positions.admit(off(2500), off(9000), 2500) == off(5000)  # waited for it, used it
    assert [b.offset for _, b in positions.statements(off(2500), off(5000))] == []
    assert positions.scans == [(off(0), off(9000)), (off(2500), off(9000))]


def test_the_scan_ahead_stops_at_the_catch_ups_end_and_the_batch_scans_the_rest() -> None:
    positions = ScannedPositions(5)
    positions.admit_ahead(off(0), off(2000), 2500)  # within the budget up to the end: no scan
    positions.admit_ahead(off(0), off(3000), 2500)
    assert positions.admit(off(0), off(3000), 2500) == off(2500)
    assert positions.scans == [(off(0), off(3000))]
    positions.admit_ahead(off(2500), off(4000), 2500)  # what is left fits the budget: no scan
    assert positions.admit(off(2500), off(9000), 2500) == off(5000)  # more came: scanned then
    assert positions.scans == [(off(0), off(3000)), (off(2500), off(9000))]


def test_a_shorter_scan_from_the_same_start_is_not_taken_for_the_range() -> None:
    positions = ScannedPositions(7)
    assert [b.offset for _, b in positions.statements(off(0), off(2400))] == [off(2000)]
    assert positions.admit(off(0), off(9000), 2500) == off(2500)
    assert positions.scans == [(off(0), off(2400)), (off(0), off(9000))]


class FailingPositions(ScannedPositions):
    def head(self) -> BinlogOffset:
        raise ConnectionError("the server went away")


def test_a_failed_scan_ahead_leaves_the_batch_to_scan(caplog: pytest.LogCaptureFixture) -> None:
    positions = FailingPositions(6)
    with caplog.at_level("DEBUG", logger="binlake.stream.positions"):
        positions.admit_ahead(off(0), None, 2500)
        assert positions.admit(off(0), off(9000), 2500) == off(2500)
    assert positions.scans == [(off(0), off(9000))]
    assert "the scan ahead of b.000001:0 failed" in caplog.text
