"""TLS to the source as ``source.tls`` says (``config/tls.py``): pymysql's options for each mode,
certificates given as PEM text written to files only this user reads, and what a connection
negotiated. Every connection binlake opens to the source takes its options from here: planning,
chunk reads (driver and Spark tasks), the binlog dump (driver and executors), verify, validate.
"""

from __future__ import annotations

import hashlib
import os
import ssl
import tempfile
from pathlib import Path
from typing import Any

from binlake.config.tls import ENCRYPTED_MODES, VERIFIED_MODES, TlsConfig
from binlake.source.server.checks import Check


def connect_options(tls: TlsConfig) -> dict[str, Any]:
    """The keyword arguments of a ``SourceConnection`` for ``tls``."""
    if tls.mode == "disabled":
        return {"ssl_disabled": True}
    if tls.mode == "preferred" and tls.ca is None and tls.cert is None:
        return {}  # pymysql's own: TLS when the server offers it, nothing checked (one shared context)
    options: dict[str, Any] = {
        "check_hostname": tls.mode == "verify_identity",
        "verify_mode": tls.mode in VERIFIED_MODES,
    }
    if tls.ca is not None:
        options["ca"] = material(tls.ca, "ca")
    if tls.cert is not None and tls.key is not None:
        options["cert"] = material(tls.cert, "cert")
        options["key"] = material(tls.key.get_secret_value(), "key")
    return {"ssl": options, "tls_required": tls.mode in ENCRYPTED_MODES}


def material(value: str, kind: str) -> str:
    """A file holding the PEM ``value`` names or is: a path as it is, PEM text written once per
    process into a private folder (mode 0600: a key must not be readable by others)."""
    if "-----BEGIN" not in value:
        return value
    folder = Path(tempfile.gettempdir()) / f"binlake-tls-{os.getuid()}-{os.getpid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / f"{kind}-{hashlib.sha256(value.encode()).hexdigest()[:16]}.pem"
    if not path.exists():
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(descriptor, "w") as file:
            file.write(value)
    return str(path)


def negotiated(conn: Any) -> tuple[str, str] | None:
    """(TLS version, cipher) of an open connection; None when it is not encrypted."""
    sock = getattr(conn, "_sock", None)
    if not isinstance(sock, ssl.SSLSocket):
        return None
    cipher = sock.cipher()
    return str(sock.version()), cipher[0] if cipher else "?"


def tls_failure(reason: str, tls: TlsConfig, where: str) -> str | None:
    """What to tell about a connection refused for TLS reasons (None: not a TLS reason)."""
    if "CERTIFICATE_VERIFY_FAILED" in reason and ("mismatch" in reason or "match" in reason):
        return (
            f"the server's certificate does not name the host `{where.rsplit(':', 1)[0]}` binlake reaches "
            f"({_detail(reason)}). Fix: set `source.hostname` to a name the certificate holds (its CN or "
            "subjectAltName), or use `source.tls.mode: verify_ca` to check the CA only"
        )
    if "CERTIFICATE_VERIFY_FAILED" in reason:
        return (
            f"the server's certificate is not signed by the CA in `source.tls.ca` ({_detail(reason)}). "
            "Fix: give the CA certificate that signed the server's (ask the server's owner; managed "
            "services publish theirs)"
        )
    if "offers no TLS" in reason or "server doesn't support it" in reason:
        return (
            f"the server offers no TLS, and `source.tls.mode: {tls.mode}` requires it. Fix: configure "
            "TLS on the server (ssl_cert, ssl_key), or lower the mode to `preferred`"
        )
    if "SSL" in reason or "TLS" in reason:
        return f"the TLS handshake failed ({_detail(reason)}). Fix: check `source.tls` (ca, cert, key)"
    return None


def tls_check(kind: str, conn: Any, tls: TlsConfig) -> Check:
    """What TLS a connection of ``kind`` negotiated, for ``binlake validate``."""
    found = negotiated(conn)
    checked = {
        "verify_identity": "the server's certificate checked against `ca` and the host name",
        "verify_ca": "the server's certificate checked against `ca` (not the host name)",
    }.get(tls.mode, "the server's certificate not checked")
    if found is not None:
        return Check(f"tls_{kind}", "ok", f"{found[0]}, {found[1]} (mode {tls.mode}: {checked})")
    if tls.mode == "disabled":
        return Check(f"tls_{kind}", "ok", "no TLS (`source.tls.mode: disabled`)")
    return Check(
        f"tls_{kind}",
        "warning",
        "not encrypted: the server offers no TLS, so passwords and rows cross the network in clear",
        "configure TLS on the server (ssl_cert, ssl_key) and set `source.tls.mode: verify_identity` "
        "with its CA in `source.tls.ca`",
    )


def _detail(reason: str) -> str:
    start = reason.find("[SSL")
    return reason[start:].rstrip(")").strip() if start >= 0 else reason
