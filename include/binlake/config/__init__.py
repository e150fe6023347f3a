"""A pipeline's configuration: one YAML file (``pipeline_file.py``) read into ``PipelineConfig``
(``pipeline.py``), its sections in modules of their own, and the reference page rendered from them
(``reference.py``).

The names below are imported from their modules when first asked for: a Spark task worker that
needs ``SourceConfig`` alone (``source.py``) does not build every model of the pipeline (a tenth of
a second of a cold snapshot's first tasks, which wait for their worker's imports).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from binlake.config.jobs import AirflowConfig, BackfillConfig, QualityConfig, VerifyConfig
    from binlake.config.pipeline import (
        CATALOG_NAME,
        PipelineConfig,
        PipelineSection,
        TransformRule,
        default_catalog_name,
        display_url,
    )
    from binlake.config.source import ServerIdRange, SourceConfig
    from binlake.config.stream import StreamConfig

#: Each name this package hands on, and the module that defines it.
_HOMES = {
    "AirflowConfig": "jobs",
    "BackfillConfig": "jobs",
    "QualityConfig": "jobs",
    "VerifyConfig": "jobs",
    "CATALOG_NAME": "pipeline",
    "PipelineConfig": "pipeline",
    "PipelineSection": "pipeline",
    "TransformRule": "pipeline",
    "default_catalog_name": "pipeline",
    "display_url": "pipeline",
    "ServerIdRange": "source",
    "SourceConfig": "source",
    "StreamConfig": "stream",
}

__all__ = [
    "CATALOG_NAME",
    "AirflowConfig",
    "BackfillConfig",
    "PipelineConfig",
    "PipelineSection",
    "QualityConfig",
    "ServerIdRange",
    "SourceConfig",
    "StreamConfig",
    "TransformRule",
    "VerifyConfig",
    "default_catalog_name",
    "display_url",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value  # asked once
    return value
