"""Pipeline configuration: a YAML file read into typed, validated, frozen pydantic models.

Every key is documented here and in the README's config reference; unknown keys are refused
(a typo must not silently fall back to a default). String values may use ``${ENV_VAR}`` or
``${ENV_VAR:-default}``; interpolation happens after YAML parsing, so a password with ``#`` or
``: `` in it cannot break the file. Passwords are ``SecretStr``: never shown by repr, logs or errors.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from binlake.errors import ConfigError

SchemaChangeBehavior = Literal["exception", "evolve", "try_evolve", "lenient", "ignore"]
StartupMode = Literal[
    "initial", "snapshot", "latest-offset", "earliest-offset", "specific-offset", "timestamp"
]
OnFailure = Literal["fail", "warn"]

SCHEMA_CHANGE_BEHAVIORS: tuple[str, ...] = get_args(SchemaChangeBehavior)
STARTUP_MODES: tuple[str, ...] = get_args(StartupMode)

_ENV_REF = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
_SINK_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\.[A-Za-z_][A-Za-z0-9_]*$")
_SECRET_KEYS = frozenset({"password"})


def _compile_regex(value: str) -> str:
    try:
        re.compile(value)
    except re.error as e:
        raise ValueError(f"not a valid regular expression ({e})") from e
    return value


Regex = Annotated[str, Field(min_length=1)]


class _Model(BaseModel):
    """Strict base: unknown keys are errors; configs are values, so frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class SparkConfig(_Model):
    master: str = "local[*]"
    """Spark master URL: ``local[*]``, ``spark://host:7077``, ``yarn``, ``k8s://…``."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark configuration (``spark.executor.memory: 4g``)."""


class PipelineSection(_Model):
    name: str
    """Pipeline name: letters, digits and ``_``; names the DAGs and state records."""
    work_dir: Path = Path(".binlake")
    """Folder for local state, catalog, warehouse and reports (relative to the current folder)."""
    parallelism: int = Field(default=2, ge=1)
    """How many chunks or binlog segments are read at once."""
    snapshot_chunks_per_task: int = Field(default=128, ge=1)
    """Chunks one Spark task reads and commits together: fewer commit more often (less work lost
    in a crash), more cost a little more overhead."""
    schema_change_behavior: SchemaChangeBehavior = "lenient"
    """What a schema change in the source does to the sink (Flink CDC's meanings)."""
    state_uri: str | None = None
    """SQLAlchemy URL of the state store; default: SQLite file ``<work_dir>/state.db``."""
    spark: SparkConfig = Field(default_factory=SparkConfig)

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


class StartupOffset(_Model):
    file: str | None = None
    """Binlog file name (``binlog.000042``), with ``pos``."""
    pos: int | None = Field(default=None, ge=4)
    """Position in ``file`` (a transaction boundary)."""
    gtid: str | None = None
    """A GTID set (MySQL) or GTID position (MariaDB, ``0-1-42``), instead of file/pos."""

    @model_validator(mode="after")
    def _one_form(self) -> StartupOffset:
        has_file = self.file is not None or self.pos is not None
        if has_file and self.gtid is not None:
            raise ValueError("give either `file` and `pos`, or `gtid`, not both")
        if has_file and (self.file is None or self.pos is None):
            raise ValueError("`file` and `pos` go together: give both")
        if not has_file and self.gtid is None:
            raise ValueError("give `file` and `pos`, or `gtid`")
        return self


class ServerIdRange(_Model):
    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start + 1


class SourceConfig(_Model):
    type: Literal["mysql"] = "mysql"
    """Source kind: MySQL 5.7+ or MariaDB 10.5+."""
    hostname: str
    port: int = Field(default=3306, ge=1, le=65535)
    username: str
    password: SecretStr = SecretStr("")
    server_id: ServerIdRange = Field(default_factory=lambda: ServerIdRange(start=5400, end=5408))
    """Replica server id(s) for binlog readers: an int or a range ``"5400-5408"``; each reader
    needs its own, so give at least as many as ``pipeline.parallelism``."""
    tables: list[Regex] = Field(min_length=1)
    """Regexes over ``database.table`` (full match) of the tables to capture."""
    tables_exclude: list[Regex] = Field(default_factory=list)
    """Regexes of tables to leave out even if ``tables`` matches them."""
    chunk_size: int = Field(default=8096, ge=1)
    """Rows per snapshot chunk."""
    fetch_size: int = Field(default=1024, ge=1)
    """Rows fetched per round trip while reading a chunk."""
    zero_dates: Literal["null", "reject"] = "null"
    """Zero dates (``0000-00-00``): read as NULL with a warning, or refuse the chunk or change."""
    select_reader: Literal["connectorx", "pymysql"] = "connectorx"
    """Reader of the snapshot's bulk SELECTs: ``connectorx`` (fast, Rust into Arrow) or ``pymysql``."""
    chunk_key_columns: dict[str, str] = Field(default_factory=dict)
    """``database.table`` → column to split on, for tables without a primary key."""
    startup_mode: StartupMode = "initial"
    startup_offset: StartupOffset | None = None
    """Where ``specific-offset`` starts."""
    startup_timestamp_ms: int | None = Field(default=None, ge=0)
    """Where ``timestamp`` starts: epoch milliseconds."""
    connect_timeout_s: float = Field(default=10.0, gt=0)

    @field_validator("tables", "tables_exclude")
    @classmethod
    def _check_regexes(cls, values: list[str]) -> list[str]:
        for value in values:
            _compile_regex(value)
        return values

    @field_validator("server_id", mode="before")
    @classmethod
    def _parse_server_id(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("expected an integer or a range like `5400-5408`")
        if isinstance(value, int):
            return {"start": value, "end": value}
        if isinstance(value, str):
            match = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*)?", value)
            if not match:
                raise ValueError("expected an integer or a range like `5400-5408`")
            start = int(match.group(1))
            end = int(match.group(2) or start)
            if end < start:
                raise ValueError("the range's end is below its start")
            return {"start": start, "end": end}
        return value

    @field_validator("chunk_key_columns")
    @classmethod
    def _check_chunk_keys(cls, value: dict[str, str]) -> dict[str, str]:
        for table in value:
            if table.count(".") != 1:
                raise ValueError(f"key `{table}` must be `database.table`")
        return value

    @model_validator(mode="after")
    def _startup_needs(self) -> SourceConfig:
        if self.startup_mode == "specific-offset" and self.startup_offset is None:
            raise ValueError("`startup_mode: specific-offset` needs `startup_offset`")
        if self.startup_mode == "timestamp" and self.startup_timestamp_ms is None:
            raise ValueError("`startup_mode: timestamp` needs `startup_timestamp_ms`")
        return self


class CatalogConfig(_Model):
    uri: str | None = None
    """SQLAlchemy URL of the Iceberg SQL catalog; default: SQLite ``<work_dir>/catalog.db``."""
    warehouse: str | None = None
    """Warehouse location; default: ``file://<work_dir>/warehouse``."""


class SinkConfig(_Model):
    type: Literal["iceberg"] = "iceberg"
    catalog: CatalogConfig = Field(default_factory=CatalogConfig)
    namespace: str | None = None
    """Iceberg namespace; default: the source table's database name."""
    table_properties: dict[str, str] = Field(default_factory=dict)
    """Iceberg table properties set on every created table."""
    bucket_count: int | None = Field(default=None, ge=1)
    """Partition tables by ``bucket(N, key)``; none when unset."""


class RouteRule(_Model):
    source_table: Regex
    """Regex over ``database.table`` (full match)."""
    sink_table: str
    """``namespace.table`` the matched tables are written to."""
    description: str | None = None

    @field_validator("source_table")
    @classmethod
    def _check_regex(cls, value: str) -> str:
        return _compile_regex(value)

    @field_validator("sink_table")
    @classmethod
    def _check_sink_table(cls, value: str) -> str:
        if not _SINK_TABLE.match(value):
            raise ValueError("must be `namespace.table` (letters, digits, `_`)")
        return value


class QualityConfig(_Model):
    tables: dict[str, list[dict[str, Any]]] = Field(default_factory=dict)
    """``namespace.table`` → great-expectations expectation configs."""
    on_failure: OnFailure = "fail"
    """``fail`` fails the run on a failed expectation; ``warn`` only reports it."""
    server_id: int | None = Field(default=None, ge=1)
    """Replica id of the binlog reader that reconciles row counts while a stream may run; default:
    one above ``source.server_id``'s range (it must differ from every other reader's)."""
    max_scan_bytes: int = Field(default=1024**3, ge=0)
    """Binlog bytes the row-count check reads at most (the sink's offset to now); a sink further
    behind gets no row-count check, with a note saying why."""

    def reader_server_id(self, source: SourceConfig) -> int:
        return self.server_id if self.server_id is not None else source.server_id.end + 1


class StreamConfig(_Model):
    trigger_interval_s: float = Field(default=10.0, gt=0)
    """Seconds between micro-batches of a continuous stream."""
    max_bytes_per_batch: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Binlog bytes one micro-batch reads at most (it always holds at least one transaction):
    bounds a catch-up batch's memory and time."""
    segment_bytes: int = Field(default=4 * 1024 * 1024, ge=1024)
    """Binlog bytes per parallel segment: a batch is cut into about this size, at transaction
    boundaries, into at most 2 × ``pipeline.parallelism`` segments."""
    checkpoint_dir: Path | None = None
    """Folder of the Spark checkpoints; default ``<work_dir>/checkpoints``."""
    merge_manifests_at: int = Field(default=32, ge=0)
    """Merge a table's manifests once a batch leaves it with this many (0: never): every commit
    adds one, and scans and merges read them all."""
    schema_change_applier: Literal["inline", "external"] = "inline"
    """Who applies a schema change the stream meets: ``inline`` (the stream itself) or ``external``
    (the stream records it and waits: Airflow's DDL DAG applies it)."""
    schema_change_timeout_s: float = Field(default=180.0, gt=0)
    """How long the stream waits for an external applier before it fails, naming the change."""
    column_decoder: bool = True
    """Decode rows events a block at a time into Arrow columns (``source/column_decoder.py``, for
    tables of the common types; ~2.5x less CPU); ``false``: row by row, as before (a way back if a
    value ever decodes differently: please report it)."""


class BackfillConfig(_Model):
    """Backfills: re-snapshots of chosen tables (or key ranges) while the stream runs."""

    server_id: int | None = Field(default=None, ge=1)
    """First replica id of the backfill's chunk readers (``pipeline.parallelism`` ids from here);
    default: two above ``source.server_id``'s range (after the quality reader's)."""
    unit_rows: int = Field(default=131_072, ge=1)
    """Rows one backfill task reads at most (whole chunks): the stream loads a task's rows at once
    when it applies them, so this bounds the stream driver's memory."""
    wait_timeout_s: float = Field(default=3600.0, gt=0)
    """How long ``binlake backfill --wait`` (and the Airflow DAG) waits for the stream to apply it."""

    def reader_server_ids(self, source: SourceConfig, parallelism: int) -> str:
        """The readers' ids as ``start-end``."""
        first = self.server_id if self.server_id is not None else source.server_id.end + 2
        return f"{first}-{first + max(1, parallelism) - 1}"


class AirflowConfig(_Model):
    """How the pipeline's Airflow DAGs run (read when Airflow parses the DAG files: no ``${VAR}``)."""

    schedule: str | None = None
    """Schedule of the main DAG (``binlake__<name>``); default none: triggered from the UI."""
    backfill_schedule: str | None = None
    """Schedule of the backfill DAG (cron or preset); default none: triggered with its form."""
    pool: str = "default_pool"
    """Airflow pool the snapshot's Spark tasks run in (bounds how many run at once)."""
    snapshot_jobs: int = Field(default=4, ge=1)
    """Spark jobs the snapshot's chunks are spread over (mapped tasks; each starts a Spark app, so
    more than the pool's slots only adds start-up time)."""
    source_conn_id: str | None = None
    """Airflow connection with the source's host, port, login and password; when set, it fills
    ``source.hostname``/``port``/``username``/``password`` (the YAML may leave them out)."""
    spark_conn_id: str = "spark_default"
    """Airflow Spark connection: the master URL the Spark jobs are submitted to."""
    tags: list[str] = Field(default_factory=list)
    """Extra DAG tags."""
    retries: int = Field(default=2, ge=0)


class PipelineConfig(_Model):
    pipeline: PipelineSection
    source: SourceConfig
    stream: StreamConfig = Field(default_factory=StreamConfig)
    sink: SinkConfig = Field(default_factory=SinkConfig)
    route: list[RouteRule] = Field(default_factory=list)
    quality: QualityConfig = Field(default_factory=QualityConfig)
    backfill: BackfillConfig = Field(default_factory=BackfillConfig)
    airflow: AirflowConfig = Field(default_factory=AirflowConfig)

    @property
    def catalog_uri(self) -> str:
        return self.sink.catalog.uri or f"sqlite:///{self.pipeline.work_dir.resolve() / 'catalog.db'}"

    @property
    def warehouse(self) -> str:
        default = f"file://{self.pipeline.work_dir.resolve() / 'warehouse'}"
        return self.sink.catalog.warehouse or default

    @property
    def checkpoint_root(self) -> Path:
        return (self.stream.checkpoint_dir or self.pipeline.work_dir / "checkpoints").resolve()

    def secrets(self) -> list[str]:
        """The secret values in this config, for log redaction."""
        value = self.source.password.get_secret_value()
        return [value] if value else []


# -- loading ---------------------------------------------------------------------------------

#: Source settings a job takes from its environment (an Airflow connection's, handed to a
#: spark-submit process without putting the password on its command line).
SOURCE_ENV = {
    "hostname": "BINLAKE_SOURCE_HOSTNAME",
    "port": "BINLAKE_SOURCE_PORT",
    "username": "BINLAKE_SOURCE_USERNAME",
    "password": "BINLAKE_SOURCE_PASSWORD",
}


def source_from_env(environ: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The ``BINLAKE_SOURCE_*`` settings present in the environment (None: none is)."""
    env = os.environ if environ is None else environ
    found = {key: env[name] for key, name in SOURCE_ENV.items() if env.get(name)}
    return found or None


def load_config(
    path: str | os.PathLike[str],
    environ: dict[str, str] | None = None,
    source_overrides: dict[str, Any] | None = None,
) -> PipelineConfig:
    """Read, interpolate and validate a pipeline YAML file.

    ``source_overrides`` replace keys of the ``source`` section (an Airflow connection's host,
    port, login and password).

    Raises:
        ConfigError: the file is missing or unreadable, not valid YAML, names an unset
            environment variable, or breaks the schema; the message gives every problem's
            key path, the value found (secrets hidden) and what is valid.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"the file does not exist (looked in {file.resolve().parent})", str(file)) from None
    except OSError as e:
        raise ConfigError(f"the file cannot be read: {e.strerror}", str(file)) from None
    env = os.environ.copy() if environ is None else environ
    return parse_config(text, str(file), env, source_overrides)


def parse_config(
    text: str, source_name: str, environ: dict[str, str], source_overrides: dict[str, Any] | None = None
) -> PipelineConfig:
    """Validate a pipeline config given as YAML text (see :func:`load_config`)."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_error_text(e), source_name) from None
    if raw is None:
        raise ConfigError("the file is empty; it needs at least `pipeline` and `source`", source_name)
    if not isinstance(raw, dict):
        raise ConfigError(
            f"the top level must be a mapping of sections, found {type(raw).__name__}", source_name
        )
    data = _interpolate(raw, environ, (), source_name)
    if source_overrides and isinstance(data.get("source"), dict):
        data["source"] = {**data["source"], **source_overrides}
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_validation_text(e, data), source_name) from None


def _yaml_error_text(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return (
        f"not valid YAML{where}: {problem}. Fix the syntax there (check indentation, "
        "unclosed quotes or brackets, and a space after each `:`)."
    )


def _interpolate(value: Any, environ: dict[str, str], path: tuple[str, ...], source: str) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, environ, (*path, str(k)), source) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, environ, (*path, str(i)), source) for i, v in enumerate(value)]
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name, default = match.group("name"), match.group("default")
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            raise ConfigError(
                f"`{'.'.join(path)}` refers to the environment variable `{name}`, which is not set. "
                f"Fix: export {name}=…, or write `${{{name}:-default}}` to give a default.",
                source,
            )

        return _ENV_REF.sub(replace, value)
    return value


def _validation_text(error: ValidationError, data: Any) -> str:
    problems = [_problem_text(e, data) for e in error.errors()]
    count = f"{len(problems)} problems" if len(problems) > 1 else "1 problem"
    return f"{count}:\n" + "\n".join(f"  - {p}" for p in problems)


def _problem_text(err: Any, data: Any) -> str:
    loc = tuple(str(part) for part in err["loc"] if not str(part).startswith("function-"))
    # pydantic puts union/validator names into loc; keep only real keys.
    key_path = ".".join(loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        valid = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(loc[-1], valid, n=1)
        hint = f" Did you mean `{close[0]}`?" if close else ""
        return f"`{key_path}`: unknown key.{hint} Valid keys here: {', '.join(valid)}."
    if kind == "missing":
        return f"`{key_path}`: required key is missing. Add it to the config."
    found = _found(loc, err.get("input"))
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return f"`{key_path}`: found {found}; valid values: {expected}."
    return f"`{key_path}`: found {found}; {msg[0].lower()}{msg[1:]}."


def _found(loc: tuple[str, ...], value: Any) -> str:
    if any(part in _SECRET_KEYS for part in loc):
        return "a value (hidden: it is a secret)"
    if isinstance(value, dict):
        return "a mapping"
    text = repr(value) if not isinstance(value, str) else value
    return f"`{text[:200]}`"


def _model_at(loc: tuple[str, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = PipelineConfig
    for part in loc:
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        sub = _model_type(field.annotation)
        if sub is None:
            return None
        model = sub
    return model


def _model_type(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_type(arg)
        if found is not None:
            return found
    return None
