"""Pipeline config: YAML → typed models, with errors that give the key path, the value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from binlake.config import PipelineConfig, ServerIdRange
from binlake.config.pipeline_file import load_config, load_pipeline_section, parse_config
from binlake.errors import ConfigError

MINIMAL = """
pipeline:
  name: shop_cdc
source:
  hostname: db.internal
  username: cdc
  password: ${DB_PASSWORD}
  tables: ['shop\\..*']
"""


def parse(text: str, **env: str) -> PipelineConfig:
    return parse_config(text, "pipeline.yaml", {"DB_PASSWORD": "pw-from-env", **env})


def error_of(text: str, **env: str) -> str:
    with pytest.raises(ConfigError) as info:
        parse(text, **env)
    return str(info.value)


def test_minimal_config_gets_documented_defaults() -> None:
    config = parse(MINIMAL)
    assert config.pipeline.name == "shop_cdc"
    assert config.pipeline.work_dir == Path(".binlake")
    assert config.pipeline.schema_change_behavior == "lenient"
    assert config.pipeline.spark.master == "local[*]"
    assert config.source.port == 3306
    assert config.source.chunk_size is None  # sized by bytes, at each table's average row length
    assert config.source.chunk_bytes == 8 << 20
    assert config.source.fetch_size == 8192
    assert config.source.startup_mode == "initial"
    assert config.source.server_id == ServerIdRange(start=5400, end=5408)
    assert config.sink.type == "iceberg"
    assert config.quality.on_failure == "fail"
    work = Path(".binlake").resolve()
    assert config.pipeline.resolved_state_uri == f"sqlite:///{work / 'state.db'}"
    assert config.catalog_uri == f"sqlite:///{work / 'catalog.db'}"
    assert config.warehouse == f"file://{work / 'warehouse'}"


def test_full_config_is_read_into_every_section() -> None:
    config = parse(
        MINIMAL
        + """
  port: 3307
  server_id: 6000-6003
  tables_exclude: ['shop\\.tmp_.*']
  chunk_key_columns: {shop.page_views: customer_id}
  startup_mode: specific-offset
  startup_offset: {file: binlog.000003, pos: 1234}
sink:
  namespace: ods
  bucket_count: 16
  table_properties: {write.target-file-size-bytes: '134217728'}
  catalog: {uri: 'postgresql+psycopg2://u@localhost/cat', warehouse: 's3://lake/wh'}
route:
  - {source_table: 'shop_[0-9]+\\.orders_[0-9]+', sink_table: ods.orders, description: shards}
quality:
  on_failure: warn
  tables:
    ods.orders: [{expectation_type: expect_column_values_to_not_be_null, kwargs: {column: id}}]
"""
    )
    assert config.source.server_id == ServerIdRange(start=6000, end=6003)
    assert len(config.source.server_id) == 4
    assert config.source.startup_offset is not None
    assert config.source.startup_offset.pos == 1234
    assert config.sink.bucket_count == 16
    assert config.catalog_uri == "postgresql+psycopg2://u@localhost/cat"
    assert config.route[0].sink_table == "ods.orders"
    assert config.quality.tables["ods.orders"][0]["kwargs"] == {"column": "id"}


def test_env_interpolation_with_default_and_after_yaml_parsing() -> None:
    # A password with YAML-significant characters must survive: interpolation is after parsing.
    config = parse(MINIMAL.replace("db.internal", "${DB_HOST:-fallback.host}"), DB_PASSWORD="a: #b'c")
    assert config.source.hostname == "fallback.host"
    assert config.source.password.get_secret_value() == "a: #b'c"
    config = parse(MINIMAL.replace("db.internal", "${DB_HOST:-fallback.host}"), DB_HOST="real.host")
    assert config.source.hostname == "real.host"


def test_unset_env_variable_is_named_with_its_key() -> None:
    message = error_of(MINIMAL.replace("${DB_PASSWORD}", "${MISSING_PW}"))
    assert "`source.password`" in message
    assert "MISSING_PW" in message
    assert "export MISSING_PW" in message


def test_a_doubled_dollar_writes_a_literal_reference() -> None:
    """`$${` is `${` itself: a password holding `${HOME}` is kept as written, not filled in."""
    config = parse(MINIMAL.replace("${DB_PASSWORD}", "p$${HOME}w$$x"), HOME="/root")
    assert config.source.password.get_secret_value() == "p${HOME}w$$x"


def test_a_key_given_twice_is_refused_naming_both_lines() -> None:
    text = MINIMAL + "  password: second\n"
    first = next(i for i, line in enumerate(text.splitlines(), 1) if "password:" in line)
    last = len(text.splitlines())
    message = error_of(text)
    assert f"the key `password` is given twice, at lines {first} and {last}: keep one" in message


def test_yaml_syntax_error_gives_line_and_column() -> None:
    message = error_of("pipeline:\n  name: [unclosed\nsource: {}\n")
    assert "not valid YAML at line" in message
    assert "pipeline.yaml" in message


def test_unknown_key_is_refused_with_suggestion_and_valid_keys() -> None:
    message = error_of(MINIMAL + "  chunk_sise: 100\n")
    assert "`source.chunk_sise`: unknown key" in message
    assert "Did you mean `chunk_size`?" in message
    assert "fetch_size" in message  # the valid keys are listed


def test_unknown_top_level_section() -> None:
    message = error_of(MINIMAL + "sinks: {}\n")
    assert "`sinks`: unknown key" in message
    assert "Did you mean `sink`?" in message


def test_missing_required_key() -> None:
    message = error_of(MINIMAL.replace("  username: cdc\n", ""))
    assert "`source.username`: required key is missing" in message


def test_wrong_type_names_path_and_value() -> None:
    message = error_of(MINIMAL + "  chunk_size: lots\n")
    assert "`source.chunk_size`: found `lots`" in message
    assert "integer" in message


def test_invalid_literal_lists_valid_values() -> None:
    message = error_of(
        MINIMAL.replace("  name: shop_cdc", "  name: shop_cdc\n  schema_change_behavior: yolo")
    )
    assert "`pipeline.schema_change_behavior`: found `yolo`" in message
    for valid in ("exception", "evolve", "try_evolve", "lenient", "ignore"):
        assert valid in message


def test_invalid_regex_is_refused() -> None:
    message = error_of(MINIMAL.replace("['shop\\..*']", "['shop\\.(orders']"))
    assert "`source.tables`" in message
    assert "not a valid regular expression" in message


def test_several_problems_are_reported_together() -> None:
    message = error_of(MINIMAL + "  chunk_size: -1\n  fetch_size: x\n")
    assert "2 problems" in message
    assert "source.chunk_size" in message
    assert "source.fetch_size" in message


def test_startup_mode_needs_its_offset() -> None:
    message = error_of(MINIMAL + "  startup_mode: specific-offset\n")
    assert "needs `startup_offset`" in message
    message = error_of(MINIMAL + "  startup_mode: specific-offset\n  startup_offset: {file: binlog.000001}\n")
    assert "`file` and `pos` go together" in message


@pytest.mark.parametrize("server_id", ["12-3", "abc", "true"])
def test_bad_server_id(server_id: str) -> None:
    assert "source.server_id" in error_of(MINIMAL + f"  server_id: {server_id}\n")


def test_bad_pipeline_name_and_sink_table() -> None:
    assert "`pipeline.name`" in error_of(MINIMAL.replace("shop_cdc", "shop-cdc"))
    message = error_of(MINIMAL + "route: [{source_table: 'a\\.b', sink_table: 'no_namespace'}]\n")
    assert "`route.0.sink_table`" in message


def test_password_is_never_shown() -> None:
    config = parse(MINIMAL, DB_PASSWORD="hunter2-secret")
    for text in (repr(config), str(config), config.model_dump_json(), repr(config.source)):
        assert "hunter2-secret" not in text
    assert config.secrets() == ["hunter2-secret"]
    # A password of the wrong type is reported without its value.
    message = error_of(MINIMAL.replace("${DB_PASSWORD}", "{nested: hunter2-secret}"))
    assert "`source.password`" in message
    assert "hunter2-secret" not in message


def test_missing_file_and_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "nope.yaml")
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    with pytest.raises(ConfigError, match="the file is empty"):
        load_config(empty)
    scalar = tmp_path / "scalar.yaml"
    scalar.write_text("just text")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(scalar)


def test_demo_pipeline_file_is_valid() -> None:
    path = Path(__file__).parents[1] / "include" / "pipelines" / "demo.yaml"
    config = load_config(path, {"BINLAKE_DEMO_PORT": "3399", "BINLAKE_DEMO_PASSWORD": "x"})
    assert config.source.port == 3399
    assert config.source.chunk_key_columns == {"shop.page_views": "customer_id"}


def test_the_pipeline_section_alone_reads_without_the_source(tmp_path: Path) -> None:
    """What the Airflow API server reads to serve a pipeline's reports: the source of this file
    comes from an Airflow connection, so the whole config cannot be loaded there."""
    path = tmp_path / "shop.yaml"
    path.write_text(
        "pipeline: {name: shop, work_dir: '${WORK:-/srv/binlake}'}\n"
        "source: {tables: ['shop\\\\..*']}\nairflow: {source_conn_id: shop_db}\n"
    )
    with pytest.raises(ConfigError, match=r"source\.hostname"):
        load_config(path, {})
    assert load_pipeline_section(path, {}).work_dir == Path("/srv/binlake")
    assert load_pipeline_section(path, {"WORK": str(tmp_path)}).work_dir == tmp_path
    path.write_text("pipeline: {name: 'not a name'}\n")
    with pytest.raises(ConfigError, match=r"pipeline\.name"):
        load_pipeline_section(path, {})


def test_the_config_package_hands_on_each_name_from_its_module() -> None:
    """``binlake.config`` imports a name's module when the name is first asked for."""
    import binlake.config as package

    for name in package.__all__:
        value = getattr(package, name)
        home = getattr(value, "__module__", None)
        assert home is None or home.startswith("binlake.config."), (name, home)
    assert sorted(package.__all__) == sorted(package._HOMES)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        package.Nothing  # noqa: B018
