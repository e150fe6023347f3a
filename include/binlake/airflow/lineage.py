"""OpenLineage of binlake's tasks, through Airflow's own provider (``apache-airflow-providers-openlineage``).

The provider asks each finished task for its lineage (``get_openlineage_facets_on_complete``);
binlake's operators answer with the MySQL tables they read and the Iceberg tables they wrote, named
as OpenLineage's naming spec says:

- a source table: namespace ``mysql://{host}:{port}``, name ``{database}.{table}``, with its columns
  (the schema the stream holds for it) as the schema facet;
- a sink table: its data's location (``file:///…``, ``s3://bucket`` and the path, as Spark's
  OpenLineage integration names Iceberg tables), a symlink to ``{catalog}.{namespace}.{table}``, its
  schema, and the rows the task wrote (a snapshot: its chunks' rows) as output statistics.

Where the events go (a file, HTTP, Kafka …) is the provider's configuration (``[openlineage]``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from binlake.config import PipelineConfig
from binlake.events import TableId


def source_dataset(config: PipelineConfig, table: TableId, columns: Sequence[tuple[str, str]]) -> Any:
    """``table`` on the source, as an OpenLineage input dataset."""
    from openlineage.client.event_v2 import InputDataset

    namespace = f"mysql://{config.source.hostname}:{config.source.port}"
    return InputDataset(namespace=namespace, name=table.name, facets=_schema(columns))


def sink_dataset(
    catalog: str, identifier: str, location: str, columns: Sequence[tuple[str, str]], rows: int | None
) -> Any:
    """Iceberg table ``identifier`` (at ``location``) as an OpenLineage output dataset."""
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.facet_v2 import output_statistics_output_dataset, symlinks_dataset

    parts = urlsplit(location)
    namespace = f"{parts.scheme or 'file'}://{parts.netloc}"
    symlink = symlinks_dataset.Identifier(namespace=f"iceberg://{catalog}", name=identifier, type="TABLE")
    facets = {**_schema(columns), "symlinks": symlinks_dataset.SymlinksDatasetFacet(identifiers=[symlink])}
    statistics: dict[str, Any] = {}
    if rows is not None:
        statistics["outputStatistics"] = output_statistics_output_dataset.OutputStatisticsOutputDatasetFacet(
            rowCount=rows
        )
    return OutputDataset(namespace=namespace, name=parts.path, facets=facets, outputFacets=statistics)


def pipeline_lineage(config: PipelineConfig, catalog_name: str, written: Mapping[TableId, int | None]) -> Any:
    """The lineage of a task that wrote the sink tables of ``written`` (source table → rows it
    wrote, None when not counted), read from the state store and the catalog."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    from binlake.schema.table_rules import table_rules
    from binlake.sink.catalog import open_catalog
    from binlake.state.store import StateStore

    with StateStore(config.pipeline.resolved_state_uri) as store:
        history = store.schema_history(config.pipeline.name)
        sources = {t: _source_columns(history, t) for t in written}
    catalog = open_catalog(config)
    counted = any(r is not None for r in written.values())
    inputs, outputs, seen = [], [], set()
    states = {t: table_rules(config, t).state_name for t in written}
    for table in written:
        inputs.append(source_dataset(config, table, sources[table]))
        # Every sink table it keeps; the rows written are counted for its state table (the
        # changelog's and history's rows are changes and versions, not rows of the source).
        for identifier in table_rules(config, table).kept_names:
            if identifier in seen or not catalog.table_exists(identifier):
                continue
            seen.add(identifier)
            sink = catalog.load_table(identifier)
            columns = [(f.name, str(f.field_type)) for f in sink.schema().fields]
            total = sum(r or 0 for t, r in written.items() if states[t] == identifier)
            rows = total if counted and identifier in states.values() else None
            outputs.append(sink_dataset(catalog_name, identifier, sink.location(), columns, rows))
    return OperatorLineage(inputs=inputs, outputs=outputs)


def _source_columns(history: Any, table: TableId) -> list[tuple[str, str]]:
    versions = [v for v in history.versions(table) if v.schema is not None]
    if not versions:
        return []
    return [(c.name, c.column_type) for c in versions[-1].schema.columns]


def _schema(columns: Sequence[tuple[str, str]]) -> dict[str, Any]:
    from openlineage.client.facet_v2 import schema_dataset

    if not columns:
        return {}
    fields = [schema_dataset.SchemaDatasetFacetFields(name=n, type=t) for n, t in columns]
    return {"schema": schema_dataset.SchemaDatasetFacet(fields=fields)}
