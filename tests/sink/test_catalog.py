"""``sink.catalog``: any catalog pyiceberg implements, under the name the pipeline gives it.

SQL catalogs are opened for real, on SQLite and on the machine's PostgreSQL; a reader opening the
same database under the configured name sees the tables, and under another name sees none (why
the name matters). No REST catalog server installs from the registries this project may use
(PyPI, Debian, npm: the reference servers are Java images), so the REST, Glue and Hive paths are
checked by the configuration binlake hands pyiceberg, and by a REST catalog that cannot be reached
failing with binlake's message and without its credential.
"""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import NoSuchNamespaceError

from binlake.airflow.pipelines import read_pipeline_file
from binlake.config import PipelineConfig
from binlake.config.pipeline_file import parse_config
from binlake.errors import ConfigError
from binlake.events import Column, CreateTable, TableId
from binlake.sink.catalog import CatalogError, catalog_properties, open_catalog
from binlake.sink.layout import TableLayout
from binlake.sink.metadata_applier import IcebergMetadataApplier
from binlake.stream.positions import config_from_options, config_options
from tests.helpers import config_dict

POSTGRES = "postgresql+psycopg2://postgres@127.0.0.1:5432/postgres"
BASE = """
pipeline: {{name: shop, work_dir: '{work}'}}
source: {{hostname: db, username: cdc, password: pw, tables: ['shop\\..*']}}
sink:
  catalog:
{catalog}
"""


def config(tmp_path: Path, catalog: str, **env: str) -> PipelineConfig:
    text = BASE.format(
        work=tmp_path / "work", catalog="\n".join(f"    {line}" for line in catalog.splitlines())
    )
    return parse_config(text, "pipeline.yaml", env)


def _create(config: PipelineConfig) -> None:
    catalog = open_catalog(config)
    columns = (Column("id", "bigint", "bigint(20)", nullable=False),)
    IcebergMetadataApplier(catalog, lambda t: (t.database, t.table), TableLayout()).apply(
        CreateTable(TableId("shop", "orders"), columns, ("id",))
    )


@pytest.fixture
def postgres_database() -> Iterator[str]:
    """A database of the test's own on the machine's PostgreSQL."""
    name = f"binlake_catalog_{uuid.uuid4().hex[:10]}"
    admin = sqlalchemy.create_engine(POSTGRES, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sqlalchemy.text(f'CREATE DATABASE "{name}"'))
    try:
        yield POSTGRES.rsplit("/", 1)[0] + f"/{name}"
    finally:
        sqlalchemy.orm.close_all_sessions()
        with admin.connect() as conn:
            conn.execute(
                sqlalchemy.text(
                    f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
                )
            )
            conn.execute(sqlalchemy.text(f'DROP DATABASE "{name}"'))


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_sql_catalog_keeps_the_tables_under_the_configured_name(
    tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    uri = (
        f"sqlite:///{tmp_path / 'cat' / 'catalog.db'}"
        if backend == "sqlite"
        else request.getfixturevalue("postgres_database")
    )
    warehouse = f"file://{tmp_path / 'warehouse'}"
    settings = config(tmp_path, f"name: lake\nuri: '{uri}'\nwarehouse: '{warehouse}'")
    assert settings.catalog_name == "lake"
    _create(settings)
    # What a user writes to read them (Spark, Trino, pyiceberg: the same name).
    assert SqlCatalog("lake", uri=uri, warehouse=warehouse).list_tables("shop") == [("shop", "orders")]
    with pytest.raises(NoSuchNamespaceError):  # under another name: nothing at all
        SqlCatalog("binlake_shop", uri=uri, warehouse=warehouse).list_tables("shop")


def test_the_default_name_and_folders_are_as_before(tmp_path: Path) -> None:
    settings = config(tmp_path, "{}")
    assert settings.catalog_name == "binlake_shop"
    assert catalog_properties(settings) == {
        "type": "sql",
        "uri": f"sqlite:///{(tmp_path / 'work').resolve() / 'catalog.db'}",
        "warehouse": f"file://{(tmp_path / 'work').resolve() / 'warehouse'}",
    }
    _create(settings)
    assert (tmp_path / "work" / "catalog.db").exists()


def test_a_rest_catalog_gets_its_properties_and_secrets_stay_secret(tmp_path: Path) -> None:
    settings = config(
        tmp_path,
        "type: rest\nname: polaris\nuri: 'https://polaris.internal:8181/api/catalog'\nwarehouse: lake\n"
        "properties: {credential: '${POLARIS_CREDENTIAL}', scope: 'PRINCIPAL_ROLE:ALL', "
        "s3.path-style-access: 'true'}",
        POLARIS_CREDENTIAL="client-id:client-s3cr3t",
    )
    assert catalog_properties(settings) == {
        "type": "rest",
        "uri": "https://polaris.internal:8181/api/catalog",
        "warehouse": "lake",
        "credential": "client-id:client-s3cr3t",
        "scope": "PRINCIPAL_ROLE:ALL",
        "s3.path-style-access": "true",
    }
    for text in (repr(settings), settings.model_dump_json(), repr(settings.sink.catalog)):
        assert "client-s3cr3t" not in text
    assert "client-id:client-s3cr3t" in settings.secrets()
    assert "true" not in settings.secrets()  # a property that is no credential stays in the logs
    # Handed to Spark jobs apart from the config (in an option Spark redacts), and back whole.
    options = config_options(settings)
    assert "client-s3cr3t" not in options["config"]
    assert "catalog_secret" in options
    assert catalog_properties(config_from_options(options)) == catalog_properties(settings)


def test_passwords_in_the_state_store_and_catalog_urls_are_secrets(tmp_path: Path) -> None:
    """Masked in logs and messages, left out of the config Spark jobs see in their options (which
    Spark shows in plans and its UI), and back whole from the options Spark redacts."""
    from binlake.config import display_url
    from binlake.logs import mask

    settings = config(tmp_path, "type: sql\nuri: 'postgresql+psycopg2://cat:c%40t-s3cr3t@db:5432/cat'")
    raw = config_dict(settings)
    raw["pipeline"]["state_uri"] = "postgresql+psycopg2://state:st4te-s3cr3t@db:5432/state"
    settings = PipelineConfig.model_validate(raw)
    assert {"c%40t-s3cr3t", "st4te-s3cr3t"} <= set(settings.secrets())
    assert (
        display_url(settings.pipeline.resolved_state_uri) == "postgresql+psycopg2://state:***@db:5432/state"
    )
    line = f"opening {settings.pipeline.state_uri} and {settings.catalog_uri}"
    assert "s3cr3t" not in mask(line, settings.secrets())
    options = config_options(settings)
    assert "s3cr3t" not in options["config"]
    assert "s3cr3t" in options["urls_secret"]  # an option whose name Spark redacts
    back = config_from_options(options)
    assert back.pipeline.state_uri == settings.pipeline.state_uri
    assert back.catalog_uri == settings.catalog_uri


def test_an_unreachable_rest_catalog_fails_with_what_where_and_fix(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    settings = config(
        tmp_path,
        f"type: rest\nuri: 'http://127.0.0.1:{port}/catalog'\nproperties: {{token: 'tok-s3cr3t-value'}}",
    )
    with pytest.raises(CatalogError) as info:
        open_catalog(settings)
    message = str(info.value)
    assert (
        f"Could not open the Iceberg rest catalog `binlake_shop` at http://127.0.0.1:{port}/catalog"
        in message
    )
    assert "Fix: check `sink.catalog`" in message
    assert "tok-s3cr3t-value" not in message


@pytest.mark.parametrize(
    ("catalog", "expected"),
    [
        (
            "type: glue\nwarehouse: 's3://lake/wh'\n"
            "properties: {glue.region: eu-west-1, glue.id: '123456789012'}",
            {
                "type": "glue",
                "warehouse": "s3://lake/wh",
                "glue.region": "eu-west-1",
                "glue.id": "123456789012",
            },
        ),
        (
            "type: hive\nuri: 'thrift://metastore:9083'\nwarehouse: 's3://lake/wh'",
            {"type": "hive", "uri": "thrift://metastore:9083", "warehouse": "s3://lake/wh"},
        ),
    ],
)
def test_glue_and_hive_catalogs_get_their_properties(
    tmp_path: Path, catalog: str, expected: dict[str, str]
) -> None:
    assert catalog_properties(config(tmp_path, catalog)) == expected


@pytest.mark.parametrize(
    ("catalog", "says"),
    [
        ("type: rest", "a `rest` catalog needs `uri`"),
        ("type: hive", "a `hive` catalog needs `uri`"),
        ("type: nessie", "`sink.catalog.type`"),
        ("properties: {uri: 'sqlite:///x.db'}", "set uri as keys of `sink.catalog`, not in `properties`"),
        ("name: 'my lake'", "`sink.catalog.name`"),
    ],
)
def test_catalog_mistakes_are_refused(tmp_path: Path, catalog: str, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        config(tmp_path, catalog)
    assert says in str(info.value)


def test_airflow_names_the_assets_after_the_configured_catalog(tmp_path: Path) -> None:
    path = tmp_path / "shop.yaml"
    path.write_text(BASE.format(work=tmp_path, catalog="    name: lake"))
    assert read_pipeline_file(path).catalog == "lake"
    path.write_text(BASE.format(work=tmp_path, catalog="    {}"))
    assert read_pipeline_file(path).catalog == "binlake_shop"
    path.write_text(BASE.format(work=tmp_path, catalog="    name: '${LAKE}'"))
    with pytest.raises(ConfigError, match="must be written out"):
        read_pipeline_file(path)
