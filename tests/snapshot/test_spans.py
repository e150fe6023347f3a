"""Where a table statement lies against a table's chunk reads (``snapshot.spans``)."""

from __future__ import annotations

from binlake.offsets import BinlogOffset
from binlake.snapshot.spans import TableSpan


def at(pos: int) -> BinlogOffset:
    return BinlogOffset("binlog.000001", pos)


# Two chunks: read over (100, 200] and (300, 400].
SPAN = TableSpan((at(100), at(300)), (at(200), at(400)))


def test_a_statement_before_every_chunk_read_is_held_by_the_snapshot() -> None:
    assert SPAN.holds(at(50))
    assert not SPAN.straddles(at(50))
    assert SPAN.holds(at(100))
    assert not SPAN.straddles(at(100))


def test_a_statement_after_every_chunk_read_is_the_stream_s() -> None:
    assert not SPAN.holds(at(450))
    assert not SPAN.straddles(at(450))


def test_a_statement_between_two_chunk_reads_straddles() -> None:
    assert SPAN.straddles(at(250))


def test_a_statement_inside_a_chunk_s_read_straddles() -> None:
    """Its SELECT may have run on either side of it: the chunk's correction cannot tell."""
    assert SPAN.straddles(at(150))
    assert TableSpan((at(100),), (at(200),)).straddles(at(150))


def test_a_chunk_without_a_low_watermark_counts_as_read_before() -> None:
    """Chunks recorded before low watermarks were: when a statement lies before their high
    watermark, nothing says they were read after it."""
    old = TableSpan((None, at(300)), (at(200), at(400)))
    assert old.straddles(at(50))
    assert old.start == at(200)
