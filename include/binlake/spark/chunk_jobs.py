"""binlake's work on Spark's executors, seen from the driver: chunk groups run as one job of the
``binlake_snapshot`` data source (the snapshot and the backfill), and binlake's own message taken
out of a failed task (Spark wraps it in a JVM stack trace no user should have to read).
"""

from __future__ import annotations

import json
import re
from typing import Any

from binlake.errors import BinlakeError
from binlake.spark.snapshot_source import SnapshotDataSource

_TASK_ERROR = re.compile(r"^binlake(?:\.\w+)*\.\w*Error: (?P<message>.*)", re.MULTILINE | re.DOTALL)


class TaskError(BinlakeError):
    """A Spark task failed with one of binlake's errors; the message is what the task said."""


def task_error(error: BaseException) -> str | None:
    """binlake's own error message inside a Spark task failure, or None if there is none."""
    matches = list(_TASK_ERROR.finditer(str(error)))
    return matches[-1].group("message").strip() if matches else None


def read_chunk_groups(
    spark: Any, options: dict[str, str], groups: list[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Read ``groups`` (one task each) into the sink tables' folders; one summary row per chunk
    (``snapshot_source.SUMMARY_SCHEMA``). Nothing is committed here: the caller commits.

    Raises:
        TaskError: a task failed with a binlake error (its message); other failures propagate.
    """
    spark.dataSource.register(SnapshotDataSource)
    try:
        frame = spark.read.format("binlake_snapshot").options(**options, groups=json.dumps(groups)).load()
        rows: list[dict[str, Any]] = frame.toArrow().to_pylist()
    except Exception as e:  # Spark wraps a failed task's error in its own exception
        message = task_error(e)
        if message is None:
            raise
        raise TaskError(message) from None
    return rows
