"""The Iceberg catalog of a pipeline, and which sink table each source table goes to."""

from __future__ import annotations

from pathlib import Path

from pyiceberg.catalog import Catalog, load_catalog
from sqlalchemy.engine.url import make_url

from binlake.config import PipelineConfig, display_url
from binlake.errors import BinlakeError
from binlake.events import TableId
from binlake.logs import mask
from binlake.schema.routes import sink_table
from binlake.sink.fenced_commits import fence_commits


class CatalogError(BinlakeError):
    """The pipeline's Iceberg catalog could not be opened."""


def catalog_properties(config: PipelineConfig) -> dict[str, str]:
    """What binlake hands pyiceberg's ``load_catalog`` besides the name: ``type``, ``uri`` and
    ``warehouse`` when set, and ``sink.catalog.properties`` (secrets revealed: for pyiceberg only)."""
    settings = config.sink.catalog
    properties: dict[str, str] = {"type": settings.type}
    if config.catalog_uri:
        properties["uri"] = config.catalog_uri
    if config.warehouse:
        properties["warehouse"] = config.warehouse
    properties.update({key: value.get_secret_value() for key, value in settings.properties.items()})
    return properties


def open_catalog(config: PipelineConfig) -> Catalog:
    """The pipeline's Iceberg catalog, of any kind pyiceberg implements (``sink.catalog``): SQLite
    under work_dir by default, Postgres at scale, or a REST, Glue, Hive … catalog the lakehouse
    already runs. pyiceberg's own configuration of the same name (``.pyiceberg.yaml``,
    ``PYICEBERG_CATALOG__<NAME>__…``) applies too; ``sink.catalog``'s keys win.

    Raises:
        CatalogError: the catalog could not be opened (unreachable, refused, misconfigured).
    """
    properties = catalog_properties(config)
    if config.sink.catalog.type == "sql":
        _make_local_folders(properties)
    try:
        catalog = load_catalog(config.catalog_name, **properties)
    except Exception as e:  # pyiceberg raises what its client libraries raise
        where = f" at {display_url(config.catalog_uri)}" if config.catalog_uri else ""
        raise CatalogError(
            f"Could not open the Iceberg {config.sink.catalog.type} catalog `{config.catalog_name}`{where}: "
            f"{_without_secrets(f'{type(e).__name__}: {e}', properties)}. Fix: check `sink.catalog` in the "
            "pipeline file (uri, warehouse, properties: credentials, endpoints) and that the catalog "
            "is reachable from this machine."
        ) from None
    return fence_commits(catalog, config.pipeline.name)  # a writer that lost its lease never commits


def _make_local_folders(properties: dict[str, str]) -> None:
    url = make_url(properties["uri"])
    if url.drivername.startswith("sqlite") and url.database:
        Path(url.database).parent.mkdir(parents=True, exist_ok=True)
    warehouse = properties.get("warehouse", "")
    if warehouse.startswith("file://"):
        Path(warehouse.removeprefix("file://")).mkdir(parents=True, exist_ok=True)


def _without_secrets(text: str, properties: dict[str, str]) -> str:
    """``text`` with every configured value that could be a credential masked (the URI only in
    its password)."""
    uri = properties.get("uri")
    if uri:
        text = text.replace(uri, display_url(uri))
    secrets = [value for key, value in properties.items() if key not in ("type", "uri", "warehouse")]
    return " ".join(mask(text, secrets).split())[:500]


def sink_identifier(config: PipelineConfig, table: TableId) -> tuple[str, str]:
    """``(namespace, table)`` of the sink table for a source table (``route.Routes`` decides)."""
    sink = sink_table(config, table)
    return sink.namespace, sink.name


def sink_name(config: PipelineConfig, table: TableId) -> str:
    """``namespace.table`` of the sink table for a source table."""
    return sink_table(config, table).identifier
