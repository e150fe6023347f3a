"""`binlake validate` against real servers: every bad input names the problem and the fix, exit ≠ 0."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from binlake.testing.private_server import PrivateMariaDB, free_port
from tests.conftest import ServerFactory
from tests.helpers import CliResult, pipeline_dict, run_binlake

WriteConfig = Callable[[dict[str, Any] | str], Path]


@pytest.fixture
def shop(mariadb: PrivateMariaDB, database: str) -> str:
    """Two tables with primary keys, one without, and a view, in the test's database."""
    mariadb.execute(
        "CREATE TABLE orders (id BIGINT PRIMARY KEY, total DECIMAL(10,2))",
        "CREATE TABLE order_items (order_id BIGINT, line SMALLINT, PRIMARY KEY (order_id, line))",
        "CREATE TABLE events (customer_id BIGINT NULL, payload TEXT)",
        "CREATE VIEW order_view AS SELECT id FROM orders",
        database=database,
    )
    return database


def validate(write_config: WriteConfig, config: dict[str, Any], *extra: str) -> CliResult:
    return run_binlake("--config", str(write_config(config)), "validate", *extra)


def check_line(result: CliResult, name: str) -> str:
    """The printed line of check ``name`` plus its fix line."""
    lines = result.stdout.splitlines()
    for i, line in enumerate(lines):
        if line.split()[1:2] == [name] and not line.startswith("ok"):
            follow = lines[i + 1] if i + 1 < len(lines) and "fix:" in lines[i + 1] else ""
            return line + "\n" + follow
    raise AssertionError(f"no failed check `{name}` in:\n{result.stdout}")


def test_good_source_passes(
    mariadb: PrivateMariaDB, shop: str, write_config: WriteConfig, tmp_path: Path
) -> None:
    config = pipeline_dict(
        mariadb,
        [rf"{shop}\..*"],
        tmp_path,
        chunk_key_columns={f"{shop}.events": "customer_id"},
    )
    result = validate(write_config, config)
    assert result.returncode == 0, result.output
    for check in ("connection", "version", "log_bin", "binlog_format", "binlog_row_image", "privileges"):
        assert f"ok       {check}" in result.stdout
    assert "3 tables match" in result.stdout  # the view is not a table
    assert "OK: all checks passed" in result.stdout

    as_json = json.loads(validate(write_config, config, "--json").stdout)
    assert as_json["ok"] is True
    assert {c["name"] for c in as_json["checks"]} >= {"config", "connection", "version", "keys"}


def test_binlog_off(mariadb_factory: ServerFactory, write_config: WriteConfig, tmp_path: Path) -> None:
    server = mariadb_factory(**{"log-bin": None})
    result = validate(write_config, pipeline_dict(server, [r"mysql\.user"], tmp_path))
    assert result.returncode == 1
    line = check_line(result, "log_bin")
    assert "the binary log is off" in line
    assert "log_bin = binlog" in line
    assert "my.cnf" in line


@pytest.mark.parametrize(
    ("option", "value", "expected", "fix"),
    [
        ("binlog-format", "STATEMENT", "found STATEMENT, binlake needs ROW", "binlog_format = ROW"),
        ("binlog-row-image", "MINIMAL", "found MINIMAL, binlake needs FULL", "binlog_row_image = FULL"),
    ],
)
def test_wrong_binlog_settings(
    mariadb_factory: ServerFactory,
    write_config: WriteConfig,
    tmp_path: Path,
    option: str,
    value: str,
    expected: str,
    fix: str,
) -> None:
    server = mariadb_factory(**{option: value})
    result = validate(write_config, pipeline_dict(server, [r"x\.y"], tmp_path))
    assert result.returncode == 1
    line = check_line(result, option.replace("-", "_"))
    assert expected in line
    assert fix in line


def test_binlog_row_metadata_minimal_is_a_warning(
    mariadb_factory: ServerFactory, write_config: WriteConfig, tmp_path: Path
) -> None:
    server = mariadb_factory(**{"binlog-row-metadata": "MINIMAL"})
    server.execute(
        "CREATE DATABASE IF NOT EXISTS meta", "CREATE TABLE IF NOT EXISTS meta.t (id INT PRIMARY KEY)"
    )
    result = validate(write_config, pipeline_dict(server, [r"meta\.t"], tmp_path))
    assert result.returncode == 0, result.output
    line = check_line(result, "binlog_row_metadata")
    assert line.startswith("warning")
    assert "found MINIMAL" in line
    assert "binlog_row_metadata = FULL" in line


def test_missing_replication_privileges(
    mariadb: PrivateMariaDB, shop: str, write_config: WriteConfig, tmp_path: Path
) -> None:
    mariadb.create_user("reader_only", "reader-pw-1", "SELECT")
    config = pipeline_dict(
        mariadb, [rf"{shop}\.orders"], tmp_path, user="reader_only", password="reader-pw-1"
    )
    result = validate(write_config, config)
    assert result.returncode == 1
    line = check_line(result, "privileges")
    assert "REPLICATION SLAVE" in line
    assert "REPLICATION CLIENT" in line
    assert "GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT" in line


def test_missing_select_on_a_table(
    mariadb: PrivateMariaDB, shop: str, write_config: WriteConfig, tmp_path: Path
) -> None:
    # Replication rights but SELECT only on one table: the other matched table is refused.
    mariadb.create_user("half_reader", "half-pw-1", "REPLICATION SLAVE, REPLICATION CLIENT")
    mariadb.execute(
        f"GRANT SELECT ON `{shop}`.`orders` TO 'half_reader'@'127.0.0.1'",
        f"GRANT INSERT ON `{shop}`.`order_items` TO 'half_reader'@'127.0.0.1'",
    )
    config = pipeline_dict(mariadb, [rf"{shop}\.order.*"], tmp_path, user="half_reader", password="half-pw-1")
    result = validate(write_config, config)
    assert result.returncode == 1
    line = check_line(result, "select")
    assert f"`{shop}.order_items`" in line
    assert f"`{shop}.orders`" not in line
    assert "GRANT SELECT" in line


def test_wrong_password(mariadb: PrivateMariaDB, write_config: WriteConfig, tmp_path: Path) -> None:
    result = validate(write_config, pipeline_dict(mariadb, [r"x\.y"], tmp_path, password="not-the-password"))
    assert result.returncode == 1
    line = check_line(result, "connection")
    assert "access denied" in line
    assert "`source.username` and `source.password`" in line
    assert "not-the-password" not in result.output


def test_unreachable_port(mariadb: PrivateMariaDB, write_config: WriteConfig, tmp_path: Path) -> None:
    port = free_port()
    result = validate(write_config, pipeline_dict(mariadb, [r"x\.y"], tmp_path, port=port))
    assert result.returncode == 1
    line = check_line(result, "connection")
    assert f"127.0.0.1:{port}" in line
    assert "unreachable" in line
    assert "`source.hostname` and `source.port`" in line


def test_table_regex_matching_nothing(
    mariadb: PrivateMariaDB, shop: str, write_config: WriteConfig, tmp_path: Path
) -> None:
    result = validate(write_config, pipeline_dict(mariadb, [rf"{shop}\.no_such_table"], tmp_path))
    assert result.returncode == 1
    line = check_line(result, "tables")
    assert "matches no table" in line
    assert f"{shop}.orders" in line  # shows what is visible
    assert "matched in full against `database.table`" in line


def test_pattern_matching_nothing_next_to_good_ones_is_a_warning(
    mariadb: PrivateMariaDB, shop: str, write_config: WriteConfig, tmp_path: Path
) -> None:
    config = pipeline_dict(mariadb, [rf"{shop}\.orders", rf"{shop}\.ordes"], tmp_path)
    result = validate(write_config, config)
    assert result.returncode == 0, result.output
    assert "warning  tables" in result.stdout
    assert rf"{shop}\\.ordes" in result.stdout


def test_table_without_primary_key_or_chunk_key(
    mariadb: PrivateMariaDB, shop: str, write_config: WriteConfig, tmp_path: Path
) -> None:
    result = validate(write_config, pipeline_dict(mariadb, [rf"{shop}\..*"], tmp_path))
    assert result.returncode == 1
    line = check_line(result, "keys")
    assert f"`{shop}.events` has no primary key and no chunk key" in line
    assert f'chunk_key_columns: {{"{shop}.events": <column>}}' in line
    assert "orders" not in line.split("fix:")[0]


def test_chunk_key_column_that_does_not_exist(
    mariadb: PrivateMariaDB, shop: str, write_config: WriteConfig, tmp_path: Path
) -> None:
    config = pipeline_dict(
        mariadb, [rf"{shop}\.events"], tmp_path, chunk_key_columns={f"{shop}.events": "nope"}
    )
    result = validate(write_config, config)
    assert result.returncode == 1
    line = check_line(result, "keys")
    assert "column `nope` does not exist" in line
    assert "customer_id, payload" in line


def test_tables_exclude(
    mariadb: PrivateMariaDB, shop: str, write_config: WriteConfig, tmp_path: Path
) -> None:
    config = pipeline_dict(mariadb, [rf"{shop}\..*"], tmp_path, tables_exclude=[rf"{shop}\.events"])
    result = validate(write_config, config)
    assert result.returncode == 0, result.output
    assert "2 tables match" in result.stdout


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("pipeline:\n  name: [oops\n", "not valid YAML at line"),
        (
            "pipeline: {name: t}\nsource: {hostname: h, username: u, tables: [a], colour: red}\n",
            "unknown key",
        ),
        ("pipeline: {name: t}\nsource: {hostname: h, tables: [a]}\n", "`source.username`: required key"),
        (
            "pipeline: {name: t}\nsource: {hostname: h, username: u, tables: [a], port: many}\n",
            "found `many`",
        ),
        ("pipeline: {name: t}\nsource: {hostname: h, username: u, tables: ['a(']}\n", "regular expression"),
    ],
    ids=["yaml-syntax", "unknown-key", "missing-key", "wrong-type", "invalid-regex"],
)
def test_bad_config_files(write_config: WriteConfig, text: str, expected: str) -> None:
    result = run_binlake("--config", str(write_config(text)), "validate")
    assert result.returncode == 1
    assert result.stdout.startswith("error    config")
    assert expected in result.stdout
    assert "Traceback" not in result.output


def test_no_config_given() -> None:
    result = run_binlake("validate", env={"BINLAKE_CONFIG": ""})
    assert result.returncode == 1
    assert "pass `--config FILE` or set BINLAKE_CONFIG" in result.stdout


# -- the binlog's hard cases ------------------------------------------------------------------------


def test_cascading_foreign_keys_are_refused_naming_table_key_and_fix(
    mariadb: PrivateMariaDB, database: str, write_config: WriteConfig, tmp_path: Path
) -> None:
    mariadb.execute(
        "CREATE TABLE parents (id INT PRIMARY KEY)",
        "CREATE TABLE children (id INT PRIMARY KEY, parent INT, "
        "CONSTRAINT fk_parent FOREIGN KEY (parent) REFERENCES parents (id) ON DELETE CASCADE)",
        "CREATE TABLE notes (id INT PRIMARY KEY, parent INT, "
        "FOREIGN KEY (parent) REFERENCES parents (id) ON DELETE RESTRICT)",  # the binlog has these
        database=database,
    )
    result = validate(write_config, pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path))
    assert result.returncode == 1
    line = check_line(result, "foreign_keys")
    assert f"`{database}.children` has `fk_parent` REFERENCES `{database}.parents` ON DELETE CASCADE" in line
    assert "notes" not in line
    assert "ON DELETE RESTRICT" in line  # the fix
    assert "source.tables_exclude" in line
    # Without the child table: no error.
    config = pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path, tables_exclude=[rf"{database}\.children"])
    assert validate(write_config, config).returncode == 0


@pytest.mark.parametrize(
    ("options", "check", "expected"),
    [
        ({"log-bin-compress": "ON"}, "binlog_compression", "compressed binlog events are read"),
        (
            {"rpl-semi-sync-master-enabled": "ON", "rpl-semi-sync-master-wait-point": "AFTER_SYNC"},
            "semi_sync",
            "chunk reads start from the last commit the engine made visible",
        ),
        ({"transaction-isolation": "READ-COMMITTED"}, "isolation", "set REPEATABLE READ for themselves"),
    ],
)
def test_settings_binlake_handles_are_reported(
    mariadb_factory: ServerFactory,
    write_config: WriteConfig,
    tmp_path: Path,
    options: dict[str, str],
    check: str,
    expected: str,
) -> None:
    server = mariadb_factory(**options)
    server.execute(
        "CREATE DATABASE IF NOT EXISTS handled", "CREATE TABLE IF NOT EXISTS handled.t (id INT PRIMARY KEY)"
    )
    result = validate(write_config, pipeline_dict(server, [r"handled\..*"], tmp_path), "--json")
    found = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    assert found[check]["status"] == "ok"
    assert expected in found[check]["message"]


def test_binlog_checksums_are_reported(
    mariadb: PrivateMariaDB, mariadb_factory: ServerFactory, write_config: WriteConfig, tmp_path: Path
) -> None:
    """CRC32 (the default): verified, ok; NONE: a warning saying what goes unseen and the fix."""
    for server, status, words in (
        (mariadb, "ok", "CRC32: every event's checksum is verified"),
        (mariadb_factory(**{"binlog-checksum": "NONE"}), "warning", "found NONE: events carry no checksum"),
    ):
        server.execute(
            "CREATE DATABASE IF NOT EXISTS sums", "CREATE TABLE IF NOT EXISTS sums.t (id INT PRIMARY KEY)"
        )
        result = validate(write_config, pipeline_dict(server, [r"sums\..*"], tmp_path), "--json")
        found = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
        assert (found["binlog_checksum"]["status"], words in found["binlog_checksum"]["message"]) == (
            status,
            True,
        )
    assert "SET GLOBAL binlog_checksum = 'CRC32'" in found["binlog_checksum"]["fix"]


def test_mysql_settings_that_cost_or_limit_are_warnings() -> None:
    from binlake.source.server.connection import ServerVersion
    from binlake.source.server.validator import _HARD_CASE_VARIABLES, _check_hard_cases

    settings = dict.fromkeys(_HARD_CASE_VARIABLES)
    settings.update(
        binlog_row_value_options="PARTIAL_JSON",
        rpl_semi_sync_source_enabled="ON",
        rpl_semi_sync_source_wait_point="AFTER_SYNC",
        rpl_semi_sync_source_timeout="2000",
        gtid_mode="OFF",
        binlog_transaction_compression="ON",
    )
    checks = {c.name: c for c in _check_hard_cases(ServerVersion.parse("8.4.3"), settings)}
    assert checks["binlog_compression"].status == "ok"
    assert checks["partial_json"].status == "warning"
    assert "binlog_row_value_options = ''" in (checks["partial_json"].fix or "")
    assert checks["semi_sync"].status == "warning"
    assert "3 s earlier" in checks["semi_sync"].message
    assert checks["gtid"].status == "warning"
    assert "gtid_mode = ON" in (checks["gtid"].fix or "")
    settings.update(gtid_mode="ON")
    with_gtids = {c.name: c for c in _check_hard_cases(ServerVersion.parse("8.4.3"), settings)}
    assert with_gtids["semi_sync"].status == "ok"
    assert "gtid" not in with_gtids


def test_a_system_versioned_table_is_refused(
    mariadb: PrivateMariaDB, database: str, write_config: WriteConfig, tmp_path: Path
) -> None:
    """MariaDB lists it as `SYSTEM VERSIONED`, not `BASE TABLE`: it was left out without a word (or,
    alone, reported as "matches no table")."""
    mariadb.execute(
        "CREATE TABLE plain (id INT PRIMARY KEY)",
        "CREATE TABLE kept (id INT PRIMARY KEY, v INT) WITH SYSTEM VERSIONING",
        database=database,
    )
    result = validate(write_config, pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path))
    assert result.returncode == 1
    line = check_line(result, "tables")
    assert f"system-versioned tables match `source.tables`: `{database}.kept`" in line
    assert "`source.tables_exclude`" in line
    config = pipeline_dict(mariadb, [rf"{database}\..*"], tmp_path)
    config["source"]["tables_exclude"] = [rf"{database}\.kept"]
    assert validate(write_config, config).returncode == 0
