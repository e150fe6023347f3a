"""The pipeline files Airflow makes DAGs of, read at parse time: names and ``airflow`` sections only.

Parse time must stay cheap and side-effect free, so the files are read as YAML without ``${VAR}``
interpolation (the environment of the DAG processor need not hold the source's settings) and
without validating the rest: each task loads the whole config when it runs.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from binlake.config import CATALOG_NAME, AirflowConfig, PipelineSection, default_catalog_name
from binlake.errors import ConfigError

#: Where the pipeline files are, unless ``BINLAKE_PIPELINES_DIR`` says otherwise.
DEFAULT_FOLDER = Path(__file__).resolve().parents[2] / "pipelines"


@dataclass(frozen=True)
class PipelineFile:
    """One pipeline YAML, as much of it as the DAGs need to be built."""

    path: Path
    name: str
    airflow: AirflowConfig
    behavior: str
    tables: tuple[str, ...]
    catalog: str
    """The Iceberg catalog's name (``sink.catalog.name``, default ``binlake_<name>``): it names
    the sink tables' Assets."""

    @property
    def dag_id(self) -> str:
        return f"binlake__{self.name}"


def pipelines_folder() -> Path:
    return Path(os.environ.get("BINLAKE_PIPELINES_DIR") or DEFAULT_FOLDER).resolve()


def read_pipeline_files(folder: Path | None = None) -> list[PipelineFile]:
    """Every ``*.yaml``/``*.yml`` in ``folder`` (default: ``pipelines_folder()``), sorted by name.

    Raises:
        ConfigError: a file is not YAML, has no valid ``pipeline.name``, a bad ``airflow`` section,
            or two files share a name.
    """
    found: dict[str, PipelineFile] = {}
    where = folder or pipelines_folder()
    for path in sorted([*where.glob("*.yaml"), *where.glob("*.yml")]):
        pipeline = read_pipeline_file(path)
        if pipeline.name in found:
            raise ConfigError(
                f"pipeline name `{pipeline.name}` is used by {found[pipeline.name].path.name} too; "
                "each pipeline needs its own name (it names the DAGs and the state records)",
                str(path),
            )
        found[pipeline.name] = pipeline
    return list(found.values())


def read_pipeline_file(path: Path) -> PipelineFile:
    """One pipeline file's name and ``airflow`` section (see the module docstring)."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot be read as YAML: {' '.join(str(e).split())}", str(path)) from None
    section: Any = raw.get("pipeline") if isinstance(raw, dict) else None
    if not isinstance(section, dict) or "${" in str(section.get("name", "")):
        raise ConfigError("needs `pipeline.name`, written out (not from ${VAR})", str(path))
    try:
        name = PipelineSection.model_validate({"name": section.get("name")}).name
        airflow = AirflowConfig.model_validate(raw.get("airflow") or {})
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise ConfigError(f"pipeline/airflow section: {problems}", str(path)) from None
    source = raw.get("source") if isinstance(raw.get("source"), dict) else {}
    return PipelineFile(
        path.resolve(),
        name,
        airflow,
        str(section.get("schema_change_behavior", "lenient")),
        tuple(str(t) for t in source.get("tables") or []),
        _catalog_name(raw, name, path),
    )


def _catalog_name(raw: dict[str, Any], pipeline: str, path: Path) -> str:
    sink: Any = raw.get("sink")
    catalog: Any = sink.get("catalog") if isinstance(sink, dict) else None
    name = catalog.get("name") if isinstance(catalog, dict) else None
    if name is None:
        return default_catalog_name(pipeline)
    if not isinstance(name, str) or not re.fullmatch(CATALOG_NAME, name):
        raise ConfigError(
            "`sink.catalog.name` must be written out (not from ${VAR}: it names the DAGs' Assets) "
            "with letters, digits, `_` and `-`",
            str(path),
        )
    return name
