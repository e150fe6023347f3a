"""The configuration reference (``docs/configuration.md``), rendered from the config models: each
key's type, default and the docstring under its field — so the page cannot drift from the code
(``tests/test_docs.py`` checks it; ``make docs`` writes it)."""

from __future__ import annotations

import json
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from binlake.config.pipeline import PipelineConfig, ServerIdRange

INTRO = """A pipeline is one YAML file (examples in `include/pipelines/`). Unknown keys are errors, and every
error names the key path, the value found and what is valid. Any string value may use
`${ENV_VAR}` or `${ENV_VAR:-default}`; substitution happens after YAML parsing, so secrets with
`#` or `: ` in them are safe; `$${` writes a literal `${`. A key given twice is an error naming both
lines. Passwords (also those in `pipeline.state_uri` and `sink.catalog.uri`) are never shown in
logs, errors, reports or XCom."""

AFTER = """| `airflow.tags`, `airflow.retries` | `[]`, `2` | extra DAG tags; task retries |

The `airflow` section, `pipeline.name` and `sink.catalog.name` are read when Airflow parses the
DAG files, without `${VAR}` substitution: write them out.

**Catalogs.** The sink opens its catalog with pyiceberg's `load_catalog(name, type=…, uri=…,
warehouse=…, **properties)`, so every catalog pyiceberg implements works, and pyiceberg's own
configuration of the same name (`.pyiceberg.yaml`, `PYICEBERG_CATALOG__<NAME>__…`) applies too
(`sink.catalog` wins). The state store stays where `pipeline.state_uri` says. Examples:

```yaml
sink:                                # a REST catalog (Polaris; Nessie, Lakekeeper, Unity alike)
  catalog:
    type: rest
    name: lake                       # readers use this name; Assets: iceberg://lake/<ns>/<table>
    uri: https://polaris.internal:8181/api/catalog
    warehouse: analytics
    properties: {credential: '${POLARIS_CREDENTIAL}', scope: 'PRINCIPAL_ROLE:ALL'}
---
sink:                                # AWS Glue (credentials from the usual AWS chain)
  catalog: {type: glue, name: glue, warehouse: 's3://lake/warehouse', properties: {glue.region: eu-west-1}}
---
sink:                                # a Hive Metastore
  catalog: {type: hive, name: hms, uri: 'thrift://metastore:9083', warehouse: 's3://lake/warehouse'}
---
sink:                                # Postgres as the SQL catalog, at scale
  catalog:
    name: lake
    uri: 'postgresql+psycopg2://binlake:${CATALOG_PASSWORD}@pg.internal/iceberg'
    warehouse: 's3://lake/warehouse'
```

Tested: SQL catalogs for real, on SQLite and PostgreSQL (a reader opening the same database under
the configured name sees every table, under another name none). No REST catalog server installs
from the registries this project builds from (the reference servers ship as Java images), so the
REST, Glue and Hive paths are tested by the exact configuration binlake hands pyiceberg and by an
unreachable REST catalog failing with binlake's message (what, where, fix) and without its
credential; run one against your catalog before production."""


#: Models written as one value in a pipeline file (``server_id: 5400-5408``).
LEAVES: tuple[type[BaseModel], ...] = (ServerIdRange,)


def reference() -> str:
    """The page, as Markdown."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    rows += [_row(key, field) for key, field in _fields(PipelineConfig, "")]
    return "\n\n".join(["# Configuration reference", INTRO, "\n".join(rows), AFTER]) + "\n"


def _fields(model: type[BaseModel], prefix: str) -> list[tuple[str, FieldInfo]]:
    found: list[tuple[str, FieldInfo]] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        nested, many = _nested(field.annotation)
        if nested is None or nested in LEAVES:
            found.append((key, field))
        else:
            found += _fields(nested, f"{key}[]." if many else f"{key}.")
    return found


def _nested(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The config model a field holds (and whether a list of them), if any."""
    if annotation in LEAVES:
        return None, False
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    for arg in typing.get_args(annotation):
        found, many = _nested(arg)
        if found is not None:
            return found, many or typing.get_origin(annotation) is list
    return None, False


def _row(key: str, field: FieldInfo) -> str:
    meaning = " ".join((field.description or "").split()).replace("``", "`").replace("|", "\\|")
    return f"| `{key}` | {_type(field.annotation)} | {_default(field)} | {meaning} |"


def _type(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(f"`{a}`" for a in typing.get_args(annotation))
    if origin in (types.UnionType, typing.Union):
        return " or ".join(_type(a) for a in typing.get_args(annotation) if a is not type(None))
    if origin is typing.Annotated:
        return _type(typing.get_args(annotation)[0])
    if origin is not None:
        return getattr(origin, "__name__", str(origin))
    return {
        "str": "text",
        "int": "integer",
        "float": "number",
        "bool": "boolean",
        "SecretStr": "secret",
        "Path": "path",
    }.get(getattr(annotation, "__name__", ""), getattr(annotation, "__name__", "value"))


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if (
        value is None
        or value is PydanticUndefined
        or (isinstance(value, SecretStr) and not value.get_secret_value())
    ):
        return "none"
    if isinstance(value, BaseModel):
        return "`" + "-".join(str(v) for v in value.model_dump().values()) + "`"
    return "`" + (str(value) if isinstance(value, str | Path) else json.dumps(value, default=str)) + "`"


if __name__ == "__main__":  # `make docs`: python -m binlake.config.reference > docs/configuration.md
    print(reference(), end="")
