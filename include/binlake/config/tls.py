"""How binlake reaches the source over TLS (``source.tls``), with the MySQL clients' modes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import SecretStr, model_validator

from binlake.config.base import Model

TlsMode = Literal["disabled", "preferred", "required", "verify_ca", "verify_identity"]

#: Modes that refuse a connection without TLS (and those that check the server's certificate).
ENCRYPTED_MODES = ("required", "verify_ca", "verify_identity")
VERIFIED_MODES = ("verify_ca", "verify_identity")


class TlsConfig(Model):
    """TLS on every connection to the source: planning, chunk reads in Spark tasks, the binlog
    (driver and executors), verify and validate. The modes are the MySQL clients' ``--ssl-mode``:
    ``preferred`` (their default) encrypts when the server offers TLS, checking nothing;
    ``required`` refuses a server without TLS; ``verify_ca`` also checks the server's certificate
    against ``ca``; ``verify_identity`` also checks that it names the host connected to."""

    mode: TlsMode = "preferred"
    """As the MySQL clients' ``--ssl-mode``: ``preferred`` encrypts when the server offers TLS and
    checks nothing; ``required`` refuses a server without TLS; ``verify_ca`` also checks the
    server's certificate against ``ca``; ``verify_identity`` also checks it names the host."""
    ca: str | None = None
    """The CA certificate(s) the server's certificate must chain to: a PEM file's path, or the PEM
    text itself (``${SOURCE_CA}``)."""
    cert: str | None = None
    """The client certificate (for users created ``REQUIRE X509``): a path or the PEM text."""
    key: SecretStr | None = None
    """The client certificate's private key: a path or the PEM text (a secret: masked everywhere)."""

    @model_validator(mode="after")
    def _consistent(self) -> TlsConfig:
        if self.mode in VERIFIED_MODES and not self.ca:
            raise ValueError(f"`mode: {self.mode}` checks the server's certificate against `ca`: give `ca`")
        if (self.cert is None) != (self.key is None):
            raise ValueError(
                "`cert` and `key` go together: give both (a client certificate and its key) or neither"
            )
        if self.mode == "disabled" and (self.ca or self.cert):
            raise ValueError(
                "`mode: disabled` uses no certificate: remove `ca`/`cert`/`key`, or choose a mode"
            )
        return self


def with_tls_key(source: dict[str, Any], options: dict[str, str]) -> None:
    """Put the TLS client key of a Spark job's ``options`` back into a source section read from
    JSON (the key travels apart from the rest, as a secret option)."""
    if options.get("tls_key_secret"):
        source.setdefault("tls", {})["key"] = options["tls_key_secret"]
