"""Pipeline configuration: a YAML file read into typed, validated, frozen pydantic models.

Every key is documented here, under its field (docs/configuration.md is rendered from that);
unknown keys are refused (a typo must not silently fall back to a default). String values may use
``${ENV_VAR}`` or ``${ENV_VAR:-default}``; interpolation happens after YAML parsing, so a password
with ``#`` or ``: `` in it cannot break the file (``pipeline_file.py`` reads a file). Passwords are
``SecretStr``: never shown by repr, logs or errors.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal, get_args

from pydantic import Field, SecretStr, field_validator, model_validator

from binlake.config.base import Model, TableRegex
from binlake.config.jobs import AirflowConfig, BackfillConfig, QualityConfig, VerifyConfig
from binlake.config.layout import LayoutRule, check_table_properties
from binlake.config.modes import ModeRule
from binlake.config.source import ServerIdRange, SourceConfig, StartupOffset
from binlake.config.stream import StreamConfig
from binlake.config.tls import TlsConfig

# their sections live in modules of their own
__all__ = [
    "AirflowConfig",
    "BackfillConfig",
    "LayoutRule",
    "ModeRule",
    "QualityConfig",
    "ServerIdRange",
    "SourceConfig",
    "StartupOffset",
    "StreamConfig",
    "TlsConfig",
    "VerifyConfig",
]

SchemaChangeBehavior = Literal["exception", "evolve", "try_evolve", "lenient", "ignore"]

SCHEMA_CHANGE_BEHAVIORS: tuple[str, ...] = get_args(SchemaChangeBehavior)

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
#: Catalog property names whose values are credentials (redacted from logs; all are SecretStr).
_CREDENTIAL_KEY = re.compile(r"(?i)secret|password|token|credential|key|auth|session")
_SINK_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")


#: What a catalog name may hold (``sink.catalog.name``; Airflow's DAG parsing checks it too).
CATALOG_NAME = r"^[A-Za-z_][A-Za-z0-9_-]*$"


def default_catalog_name(pipeline: str) -> str:
    """The catalog name of a pipeline that names none (the only one earlier releases used)."""
    return f"binlake_{pipeline}"


#: The password in a database URL (``postgresql://user:PASSWORD@host/db``).
_URL_PASSWORD = re.compile(r"^[\w+.-]+://[^:/@]*:(?P<password>[^@]*)@")


def uri_passwords(config: PipelineConfig) -> list[str]:
    """The passwords in the state store's and the catalog's URLs (secrets: masked in logs)."""
    uris = [config.pipeline.state_uri, config.sink.catalog.uri]
    return [match["password"] for uri in uris if uri and (match := _URL_PASSWORD.match(uri))]


def display_url(uri: str) -> str:
    """``uri`` with its password, if any, masked (for messages, ``plan``, hints)."""
    match = _URL_PASSWORD.match(uri)
    return uri if match is None else uri[: match.start("password")] + "***" + uri[match.end("password") :]


class SparkConfig(Model):
    master: str = "local[*]"
    """Spark master URL: ``local[*]``, ``spark://host:7077``, ``yarn``, ``k8s://…``."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark configuration (``spark.executor.memory: 4g``)."""


class PipelineSection(Model):
    name: str
    """Pipeline name: letters, digits and ``_``; names the DAGs and state records."""
    work_dir: Path = Path(".binlake")
    """Folder for local state, catalog, warehouse and reports (relative to the current folder)."""
    parallelism: int = Field(default=2, ge=1)
    """How many chunks or binlog segments are read at once."""
    snapshot_chunks_per_task: int = Field(default=32, ge=1)
    """Chunks one Spark task reads together. A Spark job holds at most ``parallelism × 4 ×`` this
    many chunks (at 8 MiB a chunk, 2 GiB of rows at the defaults), each table's committed once the
    job's tasks holding them are done (one commit per table): fewer commit more often (less work
    lost in a crash), more cost a little more overhead."""
    schema_change_behavior: SchemaChangeBehavior = "lenient"
    """What a schema change in the source does to the sink (Flink CDC's meanings)."""
    state_uri: str | None = None
    """SQLAlchemy URL of the state store; default: SQLite file ``<work_dir>/state.db``."""
    spark: SparkConfig = Field(default_factory=SparkConfig)
    writer_lease_s: float = Field(default=60.0, ge=2.0)
    """Seconds a writer's lease lasts unless renewed (every quarter of that): how long a writer that
    died on another host keeps the next out, or a paused one may pause before it is taken over."""
    metrics_dir: Path | None = None
    """A folder where the snapshot, backfill and verify jobs write their Prometheus metrics as they
    go and when they end (``binlake_<pipeline>_<job>[_<part>].prom``, for node_exporter's textfile
    collector): rows, chunks by state, duration, outcome. Off unless set."""

    @field_validator("name")
    @classmethod
    def _check_name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(
                "must start with a letter and hold only letters, digits and `_` "
                "(it becomes part of Airflow DAG ids and table names)"
            )
        return value

    @property
    def resolved_state_uri(self) -> str:
        return self.state_uri or f"sqlite:///{self.work_dir.resolve() / 'state.db'}"


#: The catalog kinds pyiceberg implements (``pyiceberg.catalog.CatalogType``).
CatalogKind = Literal["sql", "rest", "glue", "hive", "dynamodb", "bigquery", "in-memory"]


class CatalogConfig(Model):
    type: CatalogKind = "sql"
    """The Iceberg catalog: ``sql`` (SQLite or Postgres through SQLAlchemy), ``rest`` (Polaris,
    Nessie, Lakekeeper, Unity, Gravitino …), ``glue``, ``hive``, ``dynamodb``, ``bigquery``."""
    name: str | None = Field(default=None, pattern=CATALOG_NAME)
    """The catalog's name: a SQL catalog keeps its tables under it, so every reader of a SQL
    catalog must use the same; Assets are ``iceberg://<name>/<namespace>/<table>``. Default:
    ``binlake_<pipeline.name>`` (what earlier releases always used). Written out, not ``${VAR}``
    (Airflow reads it when it parses the DAGs)."""
    uri: str | None = None
    """``sql``: the SQLAlchemy URL (default: SQLite ``<work_dir>/catalog.db``); ``rest``: the
    server's URL; ``hive``: ``thrift://host:9083``; others: as pyiceberg documents (or none)."""
    warehouse: str | None = None
    """Warehouse location; default for ``sql``: ``file://<work_dir>/warehouse``; others: what the
    catalog assigns when unset."""
    properties: dict[str, SecretStr] = Field(default_factory=dict)
    """Any other pyiceberg catalog property, passed as is (``credential``, ``token``, ``scope``,
    ``s3.endpoint``, ``client.region``, ``glue.id`` …). Values are kept as secrets: catalogs take
    their credentials here, so none is shown by repr, logs or errors; use ``${VAR}`` for them."""

    @model_validator(mode="after")
    def _check_kind(self) -> CatalogConfig:
        if self.type == "rest" and not self.uri:
            raise ValueError(
                "a `rest` catalog needs `uri`, the server's URL (e.g. http://polaris:8181/api/catalog)"
            )
        if self.type == "hive" and not self.uri:
            raise ValueError("a `hive` catalog needs `uri`, the metastore's thrift URL (thrift://host:9083)")
        reserved = {"type", "uri", "warehouse"} & set(self.properties)
        if reserved:
            raise ValueError(
                f"set {', '.join(sorted(reserved))} as keys of `sink.catalog`, not in `properties`"
            )
        return self


class SinkConfig(Model):
    type: Literal["iceberg"] = "iceberg"
    """The sink: Apache Iceberg tables."""
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    namespace: str | None = None
    """Iceberg namespace; default: the source table's database name."""
    table_properties: dict[str, str] = Field(default_factory=dict)
    """Iceberg table properties set on every created table (those pyiceberg acts on, and
    ``write.merge.mode``; unknown keys are refused). A table with a primary key is made
    ``merge-on-read`` with 128 MiB files unless these or its layout rule say otherwise."""
    bucket_count: int | None = Field(default=None, ge=1)
    """Partition tables no ``layout`` rule matches by ``bucket(N, key)``; none when unset."""
    layout: list[LayoutRule] = Field(default_factory=list)
    """Per-table partitioning, sort order and properties (``partition_by: [day(created_at)]``…),
    by ``source_table`` regex: the first rule that matches a table applies."""
    modes: list[ModeRule] = Field(default_factory=list)
    """What the sink keeps of each table's changes — its current state (``upsert``), every change
    as a row (``changelog``), every version of each key (``history``), one or more — by
    ``source_table`` regex: the first rule that matches a table applies; a table no rule matches:
    ``upsert``."""

    @field_validator("table_properties")
    @classmethod
    def _check_properties(cls, value: dict[str, str]) -> dict[str, str]:
        return check_table_properties(value)


class RouteRule(Model):
    source_table: TableRegex
    """Regex over ``database.table`` (full match)."""
    sink_table: str
    """``namespace.table`` the matched tables are written to."""
    description: str | None = None
    """What the rule is for (shown by ``plan``)."""

    @field_validator("sink_table")
    @classmethod
    def _check_sink_table(cls, value: str) -> str:
        if not _SINK_TABLE.match(value):
            raise ValueError("must be `namespace.table` (letters, digits, `_`)")
        return value


class TransformRule(Model):
    """A projection and a filter for the tables ``source_table`` matches (``schema/transforms.py``)."""

    source_table: TableRegex
    """Regex over ``database.table`` (full match); the first rule that matches a table applies."""
    projection: str | None = None
    """The sink's columns, MySQL SQL over the row (``id, UPPER(c) AS c_u``); None: every column."""
    filter: str | None = None
    """The rows the sink keeps (MySQL SQL, kept where TRUE); None: every row."""
    description: str | None = None
    """What the rule is for (shown by ``plan`` and in messages naming it)."""


class PipelineConfig(Model):
    pipeline: PipelineSection
    source: SourceConfig
    stream: StreamConfig = Field(default_factory=StreamConfig)
    sink: SinkConfig = Field(default_factory=SinkConfig)
    route: list[RouteRule] = Field(default_factory=list)
    transform: list[TransformRule] = Field(default_factory=list)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    backfill: BackfillConfig = Field(default_factory=BackfillConfig)
    verify: VerifyConfig = Field(default_factory=VerifyConfig)
    airflow: AirflowConfig = Field(default_factory=AirflowConfig)

    @model_validator(mode="after")
    def _label_replicas(self) -> PipelineConfig:
        if self.source.replica_label is None:  # frozen: set once, as the default
            labelled = self.source.model_copy(update={"replica_label": f"binlake:{self.pipeline.name}"})
            object.__setattr__(self, "source", labelled)
        return self

    @property
    def catalog_name(self) -> str:
        """The Iceberg catalog's name (``sink.catalog.name``, default ``binlake_<pipeline>``)."""
        return self.sink.catalog.name or default_catalog_name(self.pipeline.name)

    @property
    def catalog_uri(self) -> str | None:
        """The catalog's URI; for ``sql`` SQLite under ``work_dir`` unless set."""
        if self.sink.catalog.uri or self.sink.catalog.type != "sql":
            return self.sink.catalog.uri
        return f"sqlite:///{self.pipeline.work_dir.resolve() / 'catalog.db'}"

    @property
    def warehouse(self) -> str | None:
        """The warehouse location; for ``sql`` ``file://<work_dir>/warehouse`` unless set."""
        if self.sink.catalog.warehouse or self.sink.catalog.type != "sql":
            return self.sink.catalog.warehouse
        return f"file://{self.pipeline.work_dir.resolve() / 'warehouse'}"

    @property
    def key_index_dir(self) -> Path:
        """Where merge-on-read sink tables keep their key indexes (``sink.keys.key_index``): a cache,
        rebuilt from the table when missing or behind."""
        return (self.pipeline.work_dir / "key-index").resolve()

    @property
    def verify_hashes_dir(self) -> Path:
        """Where ``verify`` keeps each data file's row hashes between runs (``verify.row_hashes``):
        a cache, a file hashed again when missing."""
        return (self.pipeline.work_dir / "verify-hashes").resolve()

    @property
    def checkpoint_root(self) -> Path:
        return (self.stream.checkpoint_dir or self.pipeline.work_dir / "checkpoints").resolve()

    def secrets(self) -> list[str]:
        """The secret values in this config, for log redaction."""
        values = [self.source.password.get_secret_value(), *uri_passwords(self)]
        values += [self.source.tls.key.get_secret_value()] if self.source.tls.key else []
        values += [
            value.get_secret_value()
            for key, value in self.sink.catalog.properties.items()
            if _CREDENTIAL_KEY.search(key)  # not every property: "true" must stay in the logs
        ]
        return [value for value in values if value]
