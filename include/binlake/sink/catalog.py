"""The Iceberg catalog of a pipeline, and which sink table each source table goes to."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.catalog import Catalog
from pyiceberg.catalog.sql import SqlCatalog
from sqlalchemy.engine.url import make_url

from binlake.config import PipelineConfig
from binlake.events import TableId
from binlake.schema.routes import sink_table


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
    """``(namespace, table)`` of the sink table for a source table (``route.Routes`` decides)."""
    sink = sink_table(config, table)
    return sink.namespace, sink.name


def sink_name(config: PipelineConfig, table: TableId) -> str:
    """``namespace.table`` of the sink table for a source table."""
    return sink_table(config, table).identifier
