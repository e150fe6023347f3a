"""TLS to the source, configured and verified, against a private MariaDB with certificates this test
makes (a CA, the server's for `localhost`, a client's; a second CA nobody uses) and
`require_secure_transport=ON`: the modes, a wrong CA and a wrong host refused with clear messages,
a `REQUIRE X509` user, validate's report, and the pipeline exact end to end over TLS."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from binlake.config import PipelineConfig, SourceConfig
from binlake.errors import SourceConnectionError
from binlake.source.binlog.scan import transactions
from binlake.source.server.connection import connect
from binlake.source.server.tls import negotiated
from binlake.testing.private_server import PrivateMariaDB
from tests.conftest import ServerFactory
from tests.helpers import binlog_range, pipeline_dict, run_binlake

X509_USER, X509_PASSWORD = "cdc_x509", "x509-pw"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _ca(folder: Path, name: str) -> tuple[Path, Path]:
    key, cert = folder / f"{name}.key", folder / f"{name}.pem"
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN={name}",
             "-keyout", str(key), "-out", str(cert))  # fmt: skip
    return cert, key


def _signed(folder: Path, name: str, ca: tuple[Path, Path], san: str | None) -> tuple[Path, Path]:
    key, request, cert = folder / f"{name}.key", folder / f"{name}.csr", folder / f"{name}.pem"
    _openssl(
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-subj",
        f"/CN={name}",
        "-keyout",
        str(key),
        "-out",
        str(request),
    )
    extensions = folder / f"{name}.ext"
    extensions.write_text(f"subjectAltName={san}\n" if san else "basicConstraints=CA:FALSE\n")
    _openssl("x509", "-req", "-in", str(request), "-CA", str(ca[0]), "-CAkey", str(ca[1]), "-CAcreateserial",
             "-days", "2", "-out", str(cert), "-extfile", str(extensions))  # fmt: skip
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("pki")
    ca = _ca(folder, "binlake-test-ca")
    other = _ca(folder, "someone-elses-ca")
    server = _signed(folder, "localhost", ca, "DNS:localhost")  # not 127.0.0.1: a wrong host to try
    client = _signed(folder, X509_USER, ca, None)
    return {
        "ca": ca[0], "other_ca": other[0], "server_cert": server[0], "server_key": server[1],
        "client_cert": client[0], "client_key": client[1],
    }  # fmt: skip


@pytest.fixture(scope="module")
def secure(mariadb_factory: ServerFactory, pki: dict[str, Path]) -> PrivateMariaDB:
    server = mariadb_factory(**{
        "ssl-ca": str(pki["ca"]), "ssl-cert": str(pki["server_cert"]), "ssl-key": str(pki["server_key"]),
        "require-secure-transport": "ON",
    })  # fmt: skip
    server.execute(
        f"CREATE OR REPLACE USER '{X509_USER}'@'%' IDENTIFIED BY '{X509_PASSWORD}' REQUIRE X509",
        "GRANT SELECT, RELOAD, SHOW DATABASES, REPLICATION SLAVE, REPLICATION CLIENT "
        f"ON *.* TO '{X509_USER}'@'%'",
        "CREATE DATABASE IF NOT EXISTS tls_db",
    )
    return server


def _source(server: PrivateMariaDB, host: str = "127.0.0.1", x509: bool = False, **tls: Any) -> SourceConfig:
    user, password = (X509_USER, X509_PASSWORD) if x509 else (server.user, server.password)
    return SourceConfig(
        hostname=host, port=server.port, username=user, password=password,  # type: ignore[arg-type]
        tables=[r"tls_db\..*"], tls=tls,  # type: ignore[arg-type]
    )  # fmt: skip


def _connected(source: SourceConfig) -> tuple[str, str] | None:
    with contextlib.closing(connect(source)) as conn:
        return negotiated(conn)


def test_verified_modes_connect_and_say_what_they_negotiated(
    secure: PrivateMariaDB, pki: dict[str, Path]
) -> None:
    for mode, host in (
        ("required", "127.0.0.1"),
        ("verify_ca", "127.0.0.1"),
        ("verify_identity", "localhost"),
    ):
        found = _connected(_source(secure, host, mode=mode, ca=str(pki["ca"])) if mode != "required"
                           else _source(secure, host, mode=mode))  # fmt: skip
        assert found is not None, mode
        assert found[0].startswith("TLSv1."), found


def test_a_wrong_ca_is_refused_naming_it(secure: PrivateMariaDB, pki: dict[str, Path]) -> None:
    with pytest.raises(SourceConnectionError) as refused:
        _connected(_source(secure, mode="verify_ca", ca=str(pki["other_ca"])))
    message = str(refused.value)
    assert "the server's certificate is not signed by the CA in `source.tls.ca`" in message
    assert "CERTIFICATE_VERIFY_FAILED" in message


def test_a_wrong_host_name_is_refused_under_verify_identity(
    secure: PrivateMariaDB, pki: dict[str, Path]
) -> None:
    with pytest.raises(SourceConnectionError) as refused:
        _connected(_source(secure, "127.0.0.1", mode="verify_identity", ca=str(pki["ca"])))
    assert "the server's certificate does not name the host `127.0.0.1`" in str(refused.value)
    assert _connected(_source(secure, "127.0.0.1", mode="verify_ca", ca=str(pki["ca"]))) is not None


def test_the_server_refuses_plain_connections_and_a_required_mode_refuses_a_plain_server(
    secure: PrivateMariaDB, mariadb: PrivateMariaDB
) -> None:
    with pytest.raises(SourceConnectionError, match="Could not connect"):
        _connected(_source(secure, mode="disabled"))  # require_secure_transport
    with pytest.raises(SourceConnectionError) as refused:
        _connected(_source(mariadb, mode="required"))  # the ordinary test server has no TLS
    assert "the server offers no TLS, and `source.tls.mode: required` requires it" in str(refused.value)


def test_a_require_x509_user_needs_its_client_certificate_given_as_text(
    secure: PrivateMariaDB, pki: dict[str, Path]
) -> None:
    with pytest.raises(SourceConnectionError, match="access denied"):
        _connected(_source(secure, "localhost", x509=True, mode="verify_identity", ca=str(pki["ca"])))
    # The certificate and key as PEM text (as from a secret store), the CA as a path.
    with_cert = _source(
        secure, "localhost", x509=True, mode="verify_identity", ca=str(pki["ca"]),
        cert=pki["client_cert"].read_text(), key=pki["client_key"].read_text(),
    )  # fmt: skip
    assert _connected(with_cert) is not None
    start, end = binlog_range(secure, "tls_db", ["CREATE TABLE IF NOT EXISTS d (id INT PRIMARY KEY)"],
                              ["INSERT INTO d VALUES (1)", "INSERT INTO d VALUES (2)"])  # fmt: skip
    assert [b.offset for b in transactions(with_cert, 5301, start, end)][-1] == end  # the dump too


def test_validate_reports_tls_per_connection_kind(
    secure: PrivateMariaDB, pki: dict[str, Path], write_config: Callable[..., Path], tmp_path: Path
) -> None:
    secure.execute("CREATE TABLE IF NOT EXISTS tls_db.v (id INT PRIMARY KEY)")
    raw = pipeline_dict(secure, [r"tls_db\..*"], tmp_path)
    raw["source"]["hostname"] = "localhost"
    raw["source"]["tls"] = {"mode": "verify_identity", "ca": str(pki["ca"])}
    result = run_binlake("--config", str(write_config(raw)), "validate", "--json")
    found = {c["name"]: c for c in json.loads(result.stdout)["checks"]}
    for kind in ("tls_queries", "tls_binlog"):
        assert found[kind]["status"] == "ok", found[kind]
        assert found[kind]["message"].startswith("TLSv1.")
        assert (
            "mode verify_identity: the server's certificate checked against `ca` and the host name"
            in found[kind]["message"]
        )


def test_tls_settings_are_checked_when_the_file_is_read() -> None:
    base = {"hostname": "h", "username": "u", "tables": ["a\\..*"]}
    with pytest.raises(ValueError, match="checks the server's certificate against `ca`: give `ca`"):
        SourceConfig.model_validate({**base, "tls": {"mode": "verify_ca"}})
    with pytest.raises(ValueError, match="`cert` and `key` go together"):
        SourceConfig.model_validate({**base, "tls": {"mode": "required", "cert": "c.pem"}})
    config = SourceConfig.model_validate(
        {**base, "tls": {"mode": "required", "cert": "c", "key": "secret-key"}}
    )
    assert "secret-key" not in repr(config)
    assert config.tls.key is not None


def test_the_client_key_is_a_secret_of_the_pipeline(tmp_path: Path) -> None:
    raw = {
        "pipeline": {"name": "p"},
        "source": {"hostname": "h", "username": "u", "tables": ["a\\..*"],
                   "tls": {"mode": "required", "cert": "c", "key": "-----BEGIN KEY-----"}},
    }  # fmt: skip
    assert "-----BEGIN KEY-----" in PipelineConfig.model_validate(raw).secrets()


@pytest.mark.slow
def test_the_pipeline_is_exact_end_to_end_over_verified_tls_with_a_client_certificate(
    secure: PrivateMariaDB, pki: dict[str, Path], tmp_path: Path, spark: Any
) -> None:
    """Snapshot and stream on Spark (chunk reads and binlog segments in the executors, which get
    the client key apart from the config), as the `REQUIRE X509` user under verify_identity."""
    from binlake.planner import plan
    from binlake.spark.snapshot_job import run_snapshot
    from binlake.spark.stream_job import run_stream
    from tests.helpers import assert_sink_equals_source

    secure.execute("CREATE DATABASE IF NOT EXISTS tls_e2e")
    secure.execute(
        "CREATE OR REPLACE TABLE t (id INT PRIMARY KEY, v VARCHAR(40))",
        "INSERT INTO t SELECT seq, CONCAT('v', seq) FROM seq_1_to_3000",
        database="tls_e2e",
    )
    raw = pipeline_dict(secure, [r"tls_e2e\..*"], tmp_path / "work", user=X509_USER, password=X509_PASSWORD,
                        chunk_size=500, server_id="6600-6608")  # fmt: skip
    raw["source"]["hostname"] = "localhost"
    raw["source"]["tls"] = {
        "mode": "verify_identity", "ca": str(pki["ca"]),
        "cert": pki["client_cert"].read_text(), "key": pki["client_key"].read_text(),
    }  # fmt: skip
    raw["stream"] = {"trigger_interval_s": 1, "segment_bytes": 4096}
    config = PipelineConfig.model_validate(raw)
    plan(config)
    assert run_snapshot(config, spark).complete
    secure.execute(
        "UPDATE t SET v = CONCAT(v, '+') WHERE id % 3 = 0",
        "DELETE FROM t WHERE id % 7 = 0",
        "INSERT INTO t SELECT seq, 'new' FROM seq_5000_to_5400",
        database="tls_e2e",
    )
    report = run_stream(config, spark, until_caught_up=True)
    assert report.rows > 0
    assert_sink_equals_source(config)
