"""Micro-batch admission and segment cuts: at transaction boundaries, balanced by bytes."""

from __future__ import annotations

import itertools

from binlake.offsets import BinlogOffset
from binlake.source.binlog.scan import Boundary
from binlake.stream.segments import admit, cut, distance

SIZES = {"b.000001": 1000, "b.000002": 500, "b.000003": 800}


def off(file: int, pos: int) -> BinlogOffset:
    return BinlogOffset(f"b.{file:06d}", pos)


def test_distance_spans_files() -> None:
    assert distance(off(1, 100), off(1, 400), SIZES) == 300
    assert distance(off(1, 900), off(3, 104), SIZES) == 100 + 500 + 100
    assert distance(off(2, 100), off(1, 100), SIZES) == 0


def test_admit_stops_at_the_first_boundary_past_the_budget() -> None:
    boundaries = [Boundary(off(1, p), 0) for p in (200, 300, 700, 1000)]
    assert admit(off(1, 100), boundaries, 250, SIZES) == off(1, 700)
    assert admit(off(1, 100), boundaries, 50, SIZES) == off(1, 200)  # at least one transaction
    assert admit(off(1, 100), boundaries, 5000, SIZES) is None


def test_cut_balances_segments_at_boundaries_across_files() -> None:
    boundaries = [Boundary(off(1, p), 0) for p in range(150, 1001, 50)]
    boundaries += [Boundary(off(2, p), 0) for p in range(54, 501, 50)]
    start, end = off(1, 100), off(2, 500)
    segments = cut(start, end, boundaries, 4, SIZES)
    assert segments[0][0] == start
    assert segments[-1][1] == end
    assert all(a[1] == b[0] for a, b in itertools.pairwise(segments))  # contiguous
    cuts = {s[1] for s in segments[:-1]}
    assert cuts <= {b.offset for b in boundaries}  # every cut is a transaction boundary
    sizes = [distance(a, b, SIZES) for a, b in segments]
    assert len(segments) == 4
    assert max(sizes) - min(sizes) <= 100  # balanced to within a boundary's spacing or two


def test_cut_without_inner_boundaries_is_one_segment() -> None:
    assert cut(off(1, 100), off(1, 900), [], 4, SIZES) == [(off(1, 100), off(1, 900))]
