"""binlake's work on Spark's executors, seen from the driver: chunk groups run as one Spark job (the
snapshot and the backfill), one task per reader (``pipeline.parallelism``: how many chunks are read
at once, each reader with its own replica server id), and binlake's own message taken out of a
failed task (Spark wraps it in a JVM stack trace no user should have to read).

A task reads its groups one after another, each group's chunks with the lock-free chunk reader,
and writes their rows as Parquet files into the Iceberg table's data folder, rolling to the target
file size (``spark/snapshot_task.py``). It returns one small row per chunk — its watermarks, row
count and the task's files — so the table's data never travels through the JVM; the driver commits
the files together with the chunks' ids and high watermarks (``spark/snapshot_job.py``).

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
from collections.abc import Iterator
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
    spark: Any, options: dict[str, str], groups: list[list[dict[str, Any]]], readers: int
) -> list[dict[str, Any]]:
    """Read ``groups`` into the sink tables' folders, ``readers`` at once (``pipeline.parallelism``);
    one summary row per chunk (``snapshot_task.run_task``). Nothing is committed here: the caller
    commits.

    Raises:
        TaskError: a task failed with a binlake error (its message); other failures propagate.
    """
    context = spark.sparkContext
    tasks = packed(groups, readers)
    job = context.parallelize(list(enumerate(tasks)), len(tasks))
    # What Spark's UI shows for the job (it would name a line of this file).
    context.setJobDescription(f"binlake: {sum(map(len, groups))} chunks in {len(tasks)} tasks")
    try:
        rows: list[dict[str, Any]] = job.flatMap(functools.partial(_run_groups, options)).collect()
    except Exception as e:  # Spark wraps a failed task's error in its own exception
        message = task_error(e)
        if message is None:
            raise
        raise TaskError(message) from None
    finally:
        context.setJobDescription(None)
    return rows


def packed(groups: list[list[dict[str, Any]]], readers: int) -> list[list[Group]]:
    """``groups`` (with their index) in at most ``readers`` tasks, one per reader: each group, in
    the order given (``snapshot/chunks.chunk_groups``: every table's last chunk first, then the
    longest), goes to the task with the fewest chunks so far. A task per group instead cost each
    group a task's start, and let Spark run more groups at once than there are readers (and
    replica server ids): ``docs/benchmarks.md``."""
    tasks: list[list[Group]] = [[] for _ in range(max(1, min(readers, len(groups))))]
    held = [0] * len(tasks)
    for index, chunks in enumerate(groups):
        least = held.index(min(held))
        tasks[least].append((index, chunks))
        held[least] += len(chunks)
    return tasks


def _run_groups(options: dict[str, str], task: tuple[int, list[Group]]) -> Iterator[dict[str, Any]]:
    # Imported here: this runs in a Spark Python worker, possibly on another machine.
    from binlake.spark.snapshot_task import run_task

    slot, groups = task
    for index, chunks in groups:
        yield from run_task(options, index, chunks, slot)
