"""binlake's work on Spark's executors, seen from the driver: chunk groups run as one Spark job (the
snapshot and the backfill), one task per group, and binlake's own message taken out of a failed
task (Spark wraps it in a JVM stack trace no user should have to read).

Each task reads its chunks with the lock-free chunk reader and writes their rows as Parquet files
into the Iceberg table's data folder, rolling to the target file size (``spark/snapshot_task.py``).
It returns one small row per chunk — its watermarks, row count and the task's files — so the
table's data never travels through the JVM; the driver commits the files together with the chunks'
ids and high watermarks (``spark/snapshot_job.py``).

Each task also reports its rows through an accumulator, which Spark hands to the driver as the
task finishes: ``finished_groups`` yields a group's rows then, while the job's other tasks still
run, so the driver commits a table whose tasks are all done without waiting for the slowest task of
the wave. Spark merges the accumulator of a task's successful attempt only, once (a failed or
retried attempt reports nothing), so what arrives early is exactly what ``collect`` returns later.

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
import uuid
from collections.abc import Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

from pyspark.accumulators import AccumulatorParam

from binlake.errors import BinlakeError

_TASK_ERROR = re.compile(r"^binlake(?:\.\w+)*\.\w*Error: (?P<message>.*)", re.MULTILINE | re.DOTALL)

#: A task's input: its group's index and chunks (``[{"table": "db.t", "id": 3, "key": "id", …}]``).
Group = tuple[int, list[dict[str, Any]]]
#: A finished task's output: its group's index and one summary row per chunk.
Finished = tuple[int, list[dict[str, Any]]]
#: How often the driver looks for tasks finished while their job runs.
POLL_S = 0.01


class TaskError(BinlakeError):
    """A Spark task failed with one of binlake's errors; the message is what the task said."""


def task_error(error: BaseException) -> str | None:
    """binlake's own error message inside a Spark task failure, or None if there is none."""
    matches = list(_TASK_ERROR.finditer(str(error)))
    return matches[-1].group("message").strip() if matches else None


class _Reports(AccumulatorParam[list[Finished]]):
    """The finished groups of a job, as an accumulator's value."""

    def zero(self, value: list[Finished]) -> list[Finished]:
        return []

    def addInPlace(self, value1: list[Finished], value2: list[Finished]) -> list[Finished]:  # noqa: N802
        return value1 + value2  # a new list: the driver reads it while Spark adds to it


def read_chunk_groups(
    spark: Any, options: dict[str, str], groups: list[list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Read ``groups`` (one task each) into the sink tables' folders; one summary row per chunk
    (``snapshot_task.run_task``), in the order of ``groups``. Nothing is committed here: the caller
    commits.

    Raises:
        TaskError: a task failed with a binlake error (its message); other failures propagate.
    """
    finished = sorted(finished_groups(spark, options, groups), key=lambda f: f[0])
    return [row for _, rows in finished for row in rows]


def finished_groups(
    spark: Any, options: dict[str, str], groups: list[list[dict[str, Any]]]
) -> Iterator[Finished]:
    """Read ``groups`` (one task each) as one Spark job, yielding each group's summary rows as its
    task finishes (see the module docstring); every group once.

    Raises:
        TaskError: a task failed with a binlake error (its message), after the groups finished
            before it were yielded; other failures propagate likewise.
    """
    context = spark.sparkContext
    reports = context.accumulator([], _Reports())
    job = context.parallelize(list(enumerate(groups)), max(1, len(groups))).mapPartitions(
        functools.partial(_run_groups, options, reports)
    )
    description = f"binlake: {sum(map(len, groups))} chunks in {len(groups)} tasks"
    job_group = f"binlake-chunks-{uuid.uuid4().hex}"
    yielded: set[int] = set()
    with ThreadPoolExecutor(1, thread_name_prefix="binlake-chunk-job") as pool:
        collected = pool.submit(_collect, context, job, job_group, description)
        try:
            while not wait([collected], timeout=POLL_S).done:
                yield from _new(reports.value, yielded)
            yield from _new(reports.value, yielded)
        finally:
            if not collected.done():  # the caller stopped (its commit failed): so does the job
                context.cancelJobGroup(job_group)
            reports.value = []  # Spark's registry keeps the accumulator: not its rows
        rows = _result(collected)
    by_group: dict[int, list[dict[str, Any]]] = {}
    for row in rows:
        by_group.setdefault(row["group"], []).append(row)
    yield from _new(sorted(by_group.items()), yielded)


def _collect(context: Any, job: Any, job_group: str, description: str) -> list[dict[str, Any]]:
    # Set in the thread that runs the job, whose properties it takes: ``description`` is what
    # Spark's UI shows for the job (it would name a line of this file), the group cancels it.
    context.setJobGroup(job_group, description)
    try:
        rows: list[dict[str, Any]] = job.collect()
        return rows
    finally:
        context.setJobDescription(None)
        context.setLocalProperty("spark.jobGroup.id", None)  # None unsets it


def _result(collected: Future[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    try:
        return collected.result()
    except Exception as e:  # Spark wraps a failed task's error in its own exception
        message = task_error(e)
        if message is None:
            raise
        raise TaskError(message) from None


def _new(reports: list[Finished], yielded: set[int]) -> Iterator[Finished]:
    for index, rows in reports:
        if index not in yielded:
            yielded.add(index)
            yield index, rows


def _run_groups(options: dict[str, str], reports: Any, groups: Iterable[Group]) -> Iterator[dict[str, Any]]:
    # Imported here: this runs in a Spark Python worker, possibly on another machine.
    from binlake.spark.snapshot_task import run_task

    for index, chunks in groups:
        rows = [{**row, "group": index} for row in run_task(options, index, chunks)]
        reports.add([(index, rows)])  # reaches the driver once this task has succeeded
        yield from rows
