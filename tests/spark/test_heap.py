"""The stream driver's heap (``spark/runtime/heap.py``): frozen while the stream runs, then given back."""

from __future__ import annotations

import gc
import weakref


class _Cycle:
    def __init__(self) -> None:
        self.me = self


def _in_generation_2(thing: object) -> bool:
    return any(o is thing for o in gc.get_objects(generation=2))


def test_alive_objects_leave_the_scans_while_the_block_runs_and_come_back_after() -> None:
    from binlake.spark.runtime.heap import frozen_heap

    kept = _Cycle()
    dead = weakref.ref(_Cycle())  # unreachable at once, but a cycle: only a collection frees it
    with frozen_heap():
        assert dead() is None  # collected, not frozen
        assert gc.get_freeze_count() > 0
        assert not _in_generation_2(kept)  # frozen: full collections do not walk it
    assert gc.get_freeze_count() == 0
    assert _in_generation_2(kept)  # collectable again once it dies
