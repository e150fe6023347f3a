"""Sink tables as Airflow Assets: ``iceberg://<catalog>/<namespace>/<table>``.

Which tables a pipeline has is known only when it runs (its ``source.tables`` are regexes), so
the tasks that write them declare an ``AssetAlias`` of the pipeline and attach an event for each
table they wrote. A downstream DAG schedules on the table itself::

    @dag(schedule=[Asset("iceberg://binlake_demo/shop/orders")])
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def asset_uri(catalog: str, identifier: str) -> str:
    namespace, table = identifier.split(".", 1)
    return f"iceberg://{catalog}/{namespace}/{table}"


def sink_alias(pipeline: str) -> Any:
    """The alias every writing task of ``pipeline`` declares as its outlet."""
    from airflow.sdk import AssetAlias

    return AssetAlias(f"binlake__{pipeline}__sink_tables")


def emit(
    context: Any,
    pipeline: str,
    catalog: str,
    identifiers: Iterable[str],
    per_table: Mapping[str, Mapping[str, Any]] | None = None,
    **extra: Any,
) -> None:
    """Record that this task updated ``identifiers`` (sink tables, ``namespace.table``); each
    event's extra holds ``extra`` and the table's own ``per_table`` entry (its layout …)."""
    from airflow.sdk import Asset

    events = context["outlet_events"][sink_alias(pipeline)]
    for identifier in sorted(set(identifiers)):
        own = {**extra, **(per_table or {}).get(identifier, {})}
        events.add(Asset(uri=asset_uri(catalog, identifier), name=f"{catalog}.{identifier}"), extra=own)


def layouts(config: Any, identifiers: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each sink table's partition fields and sort order (``sink/layout.describe``), for its
    asset events: what a downstream reader filters and joins on."""
    from binlake.sink.catalog import open_catalog
    from binlake.sink.layout import describe

    catalog = open_catalog(config)
    return {i: dict(describe(catalog.load_table(i))) for i in set(identifiers) if catalog.table_exists(i)}
