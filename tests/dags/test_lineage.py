"""The OpenLineage datasets of a task that wrote sink tables (``airflow/lineage.py``): every table a
source table keeps is an output — its upsert table, or without one its changelog and history —
and the rows written are counted on its state table alone."""

from __future__ import annotations

from pathlib import Path

from binlake.config import PipelineConfig
from binlake.events import Column, CreateTable, TableId
from binlake.sink.creation import create_sink_tables


def test_each_kept_table_is_an_output_the_state_table_counts_the_rows(tmp_path: Path) -> None:
    from binlake.airflow.lineage import pipeline_lineage

    config = PipelineConfig.model_validate(
        {
            "pipeline": {"name": "p", "work_dir": str(tmp_path)},
            "source": {"hostname": "h", "username": "u", "password": "x", "tables": ["db\\..*"]},
            "sink": {
                "modes": [
                    {"source_table": "db\\.a", "mode": ["changelog", "history"]},
                    {"source_table": "db\\.b", "mode": ["upsert", "changelog"]},
                ]
            },
        }
    )
    key = Column("id", "int", "int(11)", nullable=False)
    tables = [TableId("db", "a"), TableId("db", "b")]
    create_sink_tables(config, [CreateTable(t, (key,), ("id",)) for t in tables])
    lineage = pipeline_lineage(config, "lake", {tables[0]: 7, tables[1]: 5})
    rows = {
        d.facets["symlinks"].identifiers[0].name: (
            d.outputFacets["outputStatistics"].rowCount if d.outputFacets else None
        )
        for d in lineage.outputs
    }
    assert rows == {"db.a_history": 7, "db.a_changelog": None, "db.b": 5, "db.b_changelog": None}
