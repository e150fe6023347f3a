"""Logging set-up with secret redaction.

Secrets are kept out of log calls by construction (``SecretStr``, ``enable_logging=False`` for
python-mysql-replication); the redacting filter is the second line of defence, for a secret that
reaches a message through a library's text (an echoed connection string, an error).
"""

from __future__ import annotations

import logging
import sys
import threading
from collections.abc import Iterable

REDACTED = "***"

_lock = threading.Lock()
_secrets: set[str] = set()


#: Secrets shorter than this are not hidden: redacting them would mangle ordinary words.
MIN_SECRET_LENGTH = 4


def register_secret(value: str) -> None:
    """Make every later log record hide ``value`` (see ``MIN_SECRET_LENGTH``)."""
    if len(value) >= MIN_SECRET_LENGTH:
        with _lock:
            _secrets.add(value)


def redact(text: str) -> str:
    """``text`` with every registered secret replaced by ``***``."""
    with _lock:
        registered = list(_secrets)
    return mask(text, registered)


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` (of at least ``MIN_SECRET_LENGTH``) replaced by ``***``,
    the longest first (a secret holding another is hidden whole)."""
    found = {s for s in secrets if len(s) >= MIN_SECRET_LENGTH and s in text}
    for secret in sorted(found, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites a record whose rendered message, or traceback, holds a registered secret."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info:
            formatted = logging.Formatter().formatException(record.exc_info)
            if redact(formatted) != formatted:
                record.exc_info, record.exc_text = None, redact(formatted)
        return True


class CurrentStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted. Airflow's task runner (and
    pytest) swap ``sys.stderr``: a handler holding the stream of its set-up writes to a closed file
    later, and py4j's DEBUG records inside the error report that follows never end."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, _value: object) -> None:
        pass


def setup_logging(level: str = "INFO") -> None:
    """Log to stderr with timestamps, redacting secrets on every handler of the root logger."""
    root = logging.getLogger()
    root.setLevel(level.upper())
    if not any(getattr(h, "_binlake", False) for h in root.handlers):
        handler = CurrentStderrHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
        handler._binlake = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    # py4j logs every gateway connection at INFO, even at interpreter exit, after a job's summary.
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # py4j logs the traceback of every error a batch function raises; binlake raises it again in
    # its own words, so the copy is for debugging only.
    debugging = root.level <= logging.DEBUG
    logging.getLogger("py4j.clientserver").setLevel(logging.DEBUG if debugging else logging.CRITICAL)
    for existing in root.handlers:
        if not any(isinstance(f, RedactingFilter) for f in existing.filters):
            existing.addFilter(RedactingFilter())
