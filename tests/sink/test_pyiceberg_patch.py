"""binlake patches pyiceberg in one place, by name, where a job starts: opening a catalog or making
a writer leaves pyiceberg as it is; a job's start (``spark/entry.run_job``) and the CLI's data
commands install the patch. Each case in a fresh interpreter, as a job runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

WRITER = """
from binlake.events import Column, CreateTable, TableId
from binlake.sink.metadata_applier import IcebergMetadataApplier
from binlake.sink.catalog import open_catalog
from binlake.sink.pyiceberg_internals import installed
from binlake.sink.writer import IcebergWriter
from binlake.config.pipeline_file import parse_config

text = "pipeline: {{name: p, work_dir: '{work}'}}\\n"
text += "source: {{hostname: h, username: u, tables: ['d\\\\\\\\..*']}}\\n"
config = parse_config(text, "p.yaml", {{}})
catalog = open_catalog(config)
table = CreateTable(TableId("d", "t"), (Column("id", "int", "int(11)", nullable=False),), ("id",))
IcebergMetadataApplier(catalog, lambda t: (t.database, t.table)).apply(table)
IcebergWriter(catalog, "d.t")
print(installed())
"""

JOB = """
import argparse
from binlake.sink.pyiceberg_internals import installed
from binlake.spark.entry import run_job

args = argparse.Namespace(config="{work}/missing.yaml", source_from_env=False, source_file=None)
print(run_job("test", args, lambda config, spark: None) != 0, installed())
"""


def _run(code: str) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]  # the last line the code printed


def test_a_catalog_and_a_writer_leave_pyiceberg_alone(tmp_path: Path) -> None:
    assert _run(WRITER.format(work=tmp_path)) == "False"


def test_a_job_start_installs_the_patch(tmp_path: Path) -> None:
    assert _run(JOB.format(work=tmp_path)) == "True True"  # even a job that fails on its config
