"""A pipeline's configuration: one YAML file (``pipeline_file.py``) read into ``PipelineConfig``
(``pipeline.py``), its sections in modules of their own, and the reference page rendered from them
(``reference.py``)."""

from binlake.config.jobs import AirflowConfig, BackfillConfig, QualityConfig, VerifyConfig
from binlake.config.pipeline import (
    CATALOG_NAME,
    PipelineConfig,
    PipelineSection,
    ServerIdRange,
    SourceConfig,
    TransformRule,
    default_catalog_name,
    display_url,
)
from binlake.config.stream import StreamConfig

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
