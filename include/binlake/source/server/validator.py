"""Checks that a source server and a pipeline config can work together, before anything runs.

Each check gives one line: ok, warning or error, and for anything not ok the fix (the my.cnf
line, the GRANT statement, the config key). ``binlake validate`` prints them; ``plan`` runs them
first and stops on an error.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pymysql

from binlake.config import PipelineConfig, SourceConfig
from binlake.errors import SourceConnectionError
from binlake.source.binlog.scan import connection_settings
from binlake.source.binlog.transport import BinlogConnection
from binlake.source.server.checks import Check
from binlake.source.server.connection import ServerVersion, connect, global_variables, server_version
from binlake.source.server.integrity import checksum_check
from binlake.source.server.privileges import Grants, current_grants
from binlake.source.server.replicas import replica_check
from binlake.source.server.table_checks import check_tables
from binlake.source.server.tls import tls_check

MIN_MYSQL = (5, 7, 0)
MIN_MARIADB = (10, 5, 0)
#: Binlog retention below this risks the binlog being purged during a long snapshot.
MIN_RETENTION_S = 24 * 3600

#: Privileges binlake needs, and why (shown in the message when missing).
REQUIRED_PRIVILEGES = {
    "REPLICATION SLAVE": "read the binlog",
    "REPLICATION CLIENT": "read binlog positions (SHOW MASTER STATUS / SHOW BINARY LOG STATUS)",
}
#: Privileges in the documented grant that binlake itself does not use (it never locks).
ADVISED_PRIVILEGES = {
    "SHOW DATABASES": "discover databases the user has no other grant on",
    "RELOAD": "kept in the documented grant for parity with Debezium/Flink CDC set-ups",
}


def _my_cnf(line: str, restart: bool = True) -> str:
    tail = " and restart the server" if restart else ""
    return f"add `{line}` under [mysqld] in the server's my.cnf{tail}"


def validate(config: PipelineConfig) -> list[Check]:
    """Run every check against the configured source; never raises for a failed check."""
    source = config.source
    try:
        conn = connect(source)
    except SourceConnectionError as e:
        return [Check("connection", "error", str(e))]
    with contextlib.closing(conn):
        checks = [
            Check(
                "connection",
                "ok",
                f"connected to {source.hostname}:{source.port} as `{source.username}`",
            )
        ]
        version = server_version(conn)
        checks.append(_check_version(version))
        variables = global_variables(
            conn,
            "log_bin",
            "binlog_format",
            "binlog_row_image",
            "binlog_row_metadata",
            "binlog_expire_logs_seconds",
            "expire_logs_days",
            "binlog_checksum",
        )
        checks.extend(_check_binlog(variables))
        checks.append(checksum_check(variables["binlog_checksum"]))
        checks.extend(_tls(source, conn))
        checks.append(replica_check(conn, version, config))
        if (variables["log_bin"] or "").upper() in ("ON", "1"):
            checks.extend(_check_hard_cases(version, global_variables(conn, *_HARD_CASE_VARIABLES)))
        grants, account = current_grants(conn), _account(conn)
        checks.append(_check_privileges(grants, account))
        checks.extend(check_tables(conn, config, grants, account))
    return checks


def _check_version(version: ServerVersion) -> Check:
    minimum = MIN_MARIADB if version.flavor == "mariadb" else MIN_MYSQL
    if version.number >= minimum:
        return Check("version", "ok", f"{version} ({version.text})")
    wanted = ".".join(map(str, minimum[:2]))
    return Check(
        "version",
        "error",
        f"{version} is too old: binlake needs {'MariaDB' if version.flavor == 'mariadb' else 'MySQL'} "
        f"{wanted} or newer",
        "upgrade the server (binlake supports MySQL 5.7, 8.0, 8.4 and MariaDB 10.5+)",
    )


def _tls(source: SourceConfig, conn: Any) -> list[Check]:
    """The TLS each kind of connection negotiates: queries (planning, chunk reads, verify) and the
    binlog dump (driver and executors), each opened as binlake opens it."""
    with contextlib.closing(BinlogConnection(**connection_settings(source))) as dump:
        return [tls_check("queries", conn, source.tls), tls_check("binlog", dump, source.tls)]


def _check_binlog(v: dict[str, str | None]) -> list[Check]:
    checks: list[Check] = []
    if (v["log_bin"] or "").upper() not in ("ON", "1"):
        checks.append(
            Check(
                "log_bin",
                "error",
                "the binary log is off, so there are no changes to capture",
                _my_cnf("log_bin = binlog") + " (log_bin cannot be turned on at runtime; "
                "also set `server_id` to a unique non-zero value)",
            )
        )
        return checks  # the format checks mean nothing without a binlog
    checks.append(Check("log_bin", "ok", "the binary log is on"))
    checks.append(
        _expect(
            v,
            "binlog_format",
            "ROW",
            "rows are needed to capture changes, not statements",
            "SET GLOBAL binlog_format = 'ROW' also works until restart, for new sessions only",
        )
    )
    checks.append(
        _expect(
            v,
            "binlog_row_image",
            "FULL",
            "the full before and after image of every row is needed to apply updates and deletes exactly",
            "SET GLOBAL binlog_row_image = 'FULL' also works until restart, for new sessions only",
        )
    )
    metadata = (v["binlog_row_metadata"] or "").upper()
    if metadata == "FULL":
        checks.append(Check("binlog_row_metadata", "ok", "FULL: row events carry column names"))
    else:
        found = metadata or "absent (server older than MySQL 8.0.1 / MariaDB 10.5)"
        checks.append(
            Check(
                "binlog_row_metadata",
                "warning",
                f"found {found}: row events do not carry column names, so binlake decodes them "
                "from its schema history alone",
                _my_cnf("binlog_row_metadata = FULL", restart=False)
                + " (or `SET GLOBAL binlog_row_metadata = 'FULL'`)",
            )
        )
    checks.append(_check_retention(v))
    return checks


_HARD_CASE_VARIABLES = (
    "log_bin_compress",
    "binlog_transaction_compression",
    "binlog_row_value_options",
    "rpl_semi_sync_master_enabled",
    "rpl_semi_sync_source_enabled",
    "rpl_semi_sync_master_wait_point",
    "rpl_semi_sync_source_wait_point",
    "rpl_semi_sync_master_timeout",
    "rpl_semi_sync_source_timeout",
    "gtid_mode",
    "transaction_isolation",
    "tx_isolation",
)


def _on(value: str | None) -> bool:
    return (value or "").upper() in ("ON", "1")


def _check_hard_cases(version: ServerVersion, v: dict[str, str | None]) -> list[Check]:
    """Server settings binlake handles, some at a cost, or that limit what it can do later: each
    reported so nobody learns of it from a stopped stream."""
    checks: list[Check] = []
    if _on(v["log_bin_compress"]) or _on(v["binlog_transaction_compression"]):
        checks.append(Check("binlog_compression", "ok", "compressed binlog events are read (decompressed)"))
    if "PARTIAL_JSON" in (v["binlog_row_value_options"] or "").upper():
        checks.append(
            Check(
                "partial_json",
                "warning",
                "`binlog_row_value_options = PARTIAL_JSON`: JSON updates are logged as diffs, which binlake "
                "applies to the document the before image holds; a session logging MINIMAL images sends no "
                "document, and the stream stops at such an update",
                "`SET GLOBAL binlog_row_value_options = ''` (full documents in the binlog), or keep every "
                "session on `binlog_row_image = FULL`",
            )
        )
    semi_sync = _on(v["rpl_semi_sync_master_enabled"]) or _on(v["rpl_semi_sync_source_enabled"])
    point = (v["rpl_semi_sync_master_wait_point"] or v["rpl_semi_sync_source_wait_point"] or "").upper()
    gtids = version.flavor == "mariadb" or _on(v["gtid_mode"])
    if semi_sync and point == "AFTER_SYNC":
        if version.flavor == "mariadb" or gtids:
            checks.append(
                Check(
                    "semi_sync",
                    "ok",
                    "semi-synchronous replication waits after the binlog sync: chunk reads start from the "
                    "last commit the engine made visible",
                )
            )
        else:
            timeout = int(v["rpl_semi_sync_master_timeout"] or v["rpl_semi_sync_source_timeout"] or 10000)
            checks.append(
                Check(
                    "semi_sync",
                    "warning",
                    "semi-synchronous replication waits after the binlog sync and the server has no GTIDs: "
                    "each chunk reader's low watermark is an offset read "
                    f"{timeout / 1000 + 1:g} s earlier (its first chunk waits that long), and a commit "
                    "held longer than that would be missed",
                    "turn GTIDs on (`gtid_mode = ON`, `enforce_gtid_consistency = ON`): binlake then knows "
                    "exactly which commits the engine has made visible",
                )
            )
    if not gtids:
        checks.append(
            Check(
                "gtid",
                "warning",
                "the server writes no GTIDs: after a failover to a replica or a `RESET MASTER` the stream "
                "cannot find its place in the new binlog and stops (a new snapshot is then needed)",
                _my_cnf("gtid_mode = ON") + " (with `enforce_gtid_consistency = ON`)",
            )
        )
    isolation = (v["transaction_isolation"] or v["tx_isolation"] or "").upper()
    if isolation and isolation != "REPEATABLE-READ":
        checks.append(
            Check(
                "isolation",
                "ok",
                f"the server's default isolation is {isolation}: binlake's consistent-snapshot reads set "
                "REPEATABLE READ for themselves",
            )
        )
    return checks


def _expect(v: dict[str, str | None], name: str, wanted: str, why: str, runtime: str) -> Check:
    found = (v[name] or "").upper()
    if found == wanted:
        return Check(name, "ok", wanted)
    return Check(
        name,
        "error",
        f"found {found or 'nothing'}, binlake needs {wanted}: {why}",
        f"{_my_cnf(f'{name} = {wanted}')}; {runtime}",
    )


def _check_retention(v: dict[str, str | None]) -> Check:
    seconds = int(v["binlog_expire_logs_seconds"] or 0)
    if not seconds and v["expire_logs_days"]:
        seconds = int(float(v["expire_logs_days"]) * 86400)
    if seconds == 0:
        return Check("binlog_retention", "ok", "binlogs are kept until purged by hand")
    if seconds >= MIN_RETENTION_S:
        return Check("binlog_retention", "ok", f"binlogs are kept {seconds / 86400:g} days")
    return Check(
        "binlog_retention",
        "warning",
        f"binlogs are kept only {seconds / 3600:g} hours: a snapshot or a stopped stream that "
        "takes longer loses its position and must start over",
        _my_cnf("binlog_expire_logs_seconds = 604800", restart=False) + " (7 days)",
    )


def _account(conn: pymysql.Connection[Any]) -> str:
    """The account the server matched the login to, quoted for a GRANT (`'cdc'@'%'`)."""
    with conn.cursor() as cur:
        cur.execute("SELECT CURRENT_USER()")
        user, _, host = str(cur.fetchone()[0]).rpartition("@")
    return f"'{user}'@'{host}'"


def _check_privileges(grants: Grants, account: str) -> Check:
    missing = [p for p in REQUIRED_PRIVILEGES if not grants.has_global(p)]
    advised = [p for p in ADVISED_PRIVILEGES if not grants.has_global(p)]
    grant = f"GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO {account}"
    if missing:
        needs = "; ".join(f"{p} to {REQUIRED_PRIVILEGES[p]}" for p in missing)
        return Check(
            "privileges",
            "error",
            f"the user lacks {', '.join(missing)}: binlake needs {needs}",
            f"as an admin, run `{grant}`",
        )
    if advised:
        reasons = "; ".join(f"{p}: {ADVISED_PRIVILEGES[p]}" for p in advised)
        return Check(
            "privileges",
            "warning",
            f"the user lacks {', '.join(advised)} ({reasons})",
            f"as an admin, run `{grant}`",
        )
    return Check("privileges", "ok", "REPLICATION SLAVE, REPLICATION CLIENT, SHOW DATABASES, RELOAD")


def has_errors(checks: list[Check]) -> bool:
    return any(c.status == "error" for c in checks)
