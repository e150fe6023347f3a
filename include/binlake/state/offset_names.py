"""The names under which the state store keeps a pipeline's binlog offsets (``state.named_offsets``).

Every step reads or writes some of them — the snapshot its switch, the stream where it is, backfills
and quality checks where the stream got — so they live with the store, not with one step.
"""

from __future__ import annotations

#: The snapshot's switch offset: the smallest high watermark (written by the snapshot job).
SWITCH = "switch"
#: Where the stream applied everything (written per batch).
STREAM = "stream"
#: Where the current stream lineage began (names its Spark checkpoint).
ORIGIN = "stream.origin"
#: Where the stream was re-anchored last: the snapshot's chunk watermarks are positions of an older
#: binlog (the stream was past all of them), so no snapshot filter applies any more.
ANCHOR = "stream.anchor"
