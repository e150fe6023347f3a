"""The Iceberg catalog of a pipeline, and which sink table each source table goes to."""

from __future__ import annotations

import re
from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy.engine.url import make_url

from binlake.config import PipelineConfig
from binlake.events import TableId


def catalog_name(config: PipelineConfig) -> str:
    """The catalog's name; a SQL catalog keeps its tables under it, so readers must use the same."""
    return f"binlake_{config.pipeline.name}"


def open_catalog(config: PipelineConfig) -> Catalog:
    """The pipeline's Iceberg SQL catalog (SQLite under work_dir by default, Postgres at scale)."""
    uri = config.catalog_uri
    url = make_url(uri)
    if url.drivername.startswith("sqlite") and url.database:
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    warehouse = config.warehouse
    if warehouse.startswith("file://"):
        Path(warehouse.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    return SqlCatalog(catalog_name(config), uri=uri, warehouse=warehouse)


def sink_identifier(config: PipelineConfig, table: TableId) -> tuple[str, str]:
    """``(namespace, table)`` of the sink table for a source table.

    The first ``route`` rule whose regex matches ``database.table`` in full decides; otherwise the
    table keeps its name in ``sink.namespace`` (default: the source database's name).
    """
    for rule in config.route:
        if re.fullmatch(rule.source_table, table.name):
            namespace, name = rule.sink_table.split(".", 1)
            return namespace, name
    return config.sink.namespace or table.database, table.table
