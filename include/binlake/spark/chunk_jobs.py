"""binlake's work on Spark's executors, seen from the driver: chunk groups run as one Spark job (the
snapshot and the backfill), one task per group, and binlake's own message taken out of a failed
task (Spark wraps it in a JVM stack trace no user should have to read).

Each task reads its chunks with the lock-free chunk reader and writes their rows as Parquet files
into the Iceberg table's data folder, rolling to the target file size (``spark/snapshot_task.py``).
It returns one small row per chunk — its watermarks, row count and the task's files — so the
table's data never travels through the JVM; the driver commits the files together with the chunks'
ids and high watermarks (``spark/snapshot_job.py``).

The job is a plain RDD of the groups, not a Python data source: a data source is planned in Python
processes of its own, which a fresh Spark session starts first (~2 s of a cold 1M-row snapshot on 2
cores, ~0.15 s of each warm one: ``docs/benchmarks.md``).

Options (all strings): ``source`` (the source section as JSON, without the password),
``password``, ``tables`` (table schemas by name, JSON), ``locations`` (Iceberg data folder by
table, JSON), ``target_file_size`` (bytes), ``server_ids`` (``start-end``), and what
``snapshot_job.task_options`` adds. They travel in the tasks' closure, never in a command line.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator
from typing import Any

from binlake.errors import BinlakeError

_TASK_ERROR = re.compile(r"^binlake(?:\.\w+)*\.\w*Error: (?P<message>.*)", re.MULTILINE | re.DOTALL)

#: A task's input: its group's index and chunks (``[{"table": "db.t", "id": 3, "key": "id", …}]``).
Group = tuple[int, list[dict[str, Any]]]


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
    (``snapshot_task.run_task``). Nothing is committed here: the caller commits.

    Raises:
        TaskError: a task failed with a binlake error (its message); other failures propagate.
    """
    context = spark.sparkContext
    tasks = context.parallelize(list(enumerate(groups)), max(1, len(groups)))
    # What Spark's UI shows for the job (it would name a line of this file).
    context.setJobDescription(f"binlake: {sum(map(len, groups))} chunks in {len(groups)} tasks")
    try:
        rows: list[dict[str, Any]] = tasks.mapPartitions(functools.partial(_run_groups, options)).collect()
    except Exception as e:  # Spark wraps a failed task's error in its own exception
        message = task_error(e)
        if message is None:
            raise
        raise TaskError(message) from None
    finally:
        context.setJobDescription(None)
    return rows


def _run_groups(options: dict[str, str], groups: Iterable[Group]) -> Iterator[dict[str, Any]]:
    # Imported here: this runs in a Spark Python worker, possibly on another machine.
    from binlake.spark.snapshot_task import run_task

    for index, chunks in groups:
        yield from run_task(options, index, chunks)
