"""Which chunk a sink key lies in: the NumPy path for integer keys agrees with the per-value one."""

from __future__ import annotations

import itertools
import random
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest

from binlake.events import Column
from binlake.source.chunks.splitter import ChunkRange
from binlake.verify.sink_sums import ChunkIndex

_TOP = 2**64 - 1


def _per_value(index: ChunkIndex, keys: pa.Array) -> list[int]:
    return [index._of_value(v) for v in keys.to_pylist()]


@pytest.mark.parametrize("open_start", [True, False])
def test_unsigned_bigint_keys_above_two_to_the_63_find_their_chunk(open_start: bool) -> None:
    """BIGINT UNSIGNED keys reach the sink as decimal(20, 0); those above 2^63 (gift cards') must
    not wrap around into another chunk."""
    column = Column("id", "bigint", "bigint(20) unsigned", nullable=True, unsigned=True)
    rng = random.Random(7)
    bounds = [rng.randrange(2**62, _TOP) for _ in range(6)] + [2**63, 2**63 + 1]
    bounds.sort()
    ranges = [ChunkRange(None if open_start else 0, bounds[0])]
    gap = (bounds[2], bounds[3])
    ranges += [ChunkRange(a, b) for a, b in itertools.pairwise(bounds) if (a, b) != gap]
    ranges.append(ChunkRange(bounds[-1], None))
    keys = [0, 1, 2**63 - 1, 2**63, 2**63 + 1, _TOP, None] + bounds + [b - 1 for b in bounds]
    array = pa.array([None if k is None else Decimal(k) for k in keys], pa.decimal128(20, 0))
    index = ChunkIndex(column, ranges)
    assert index._integer_dtype(array.type) is np.uint64  # the NumPy path, not the per-value one
    found = index.of(array)
    assert found.tolist() == _per_value(index, array)
    assert found[keys.index(_TOP)] == len(ranges) - 1
    assert (found == -1).any(), "the gap left between two chunks holds keys in none"


def test_signed_keys_find_their_chunk_as_before() -> None:
    column = Column("id", "bigint", "bigint(20)", nullable=False)
    ranges = [ChunkRange(None, -5), ChunkRange(-5, 10), ChunkRange(20, None)]
    array = pa.array([-(2**63), -6, -5, 0, 9, 10, 15, 20, 2**63 - 1], pa.int64())
    index = ChunkIndex(column, ranges)
    assert index.of(array).tolist() == _per_value(index, array) == [0, 0, 1, 1, 1, -1, -1, 2, 2]
    assert index.of(array).dtype == np.int64
