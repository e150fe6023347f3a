"""binlake's exceptions: one base class, named subclasses, each message saying what, where and the fix."""

from __future__ import annotations


class BinlakeError(Exception):
    """Base of every error binlake raises on purpose; the CLI prints its message, not a traceback."""

    exit_code: int = 1


class ConfigError(BinlakeError):
    """The pipeline configuration is missing, unreadable or invalid."""

    exit_code = 2

    def __init__(self, message: str, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"In pipeline config `{path}`: {message}" if path else message)


class SourceConnectionError(BinlakeError):
    """binlake could not connect to the source database."""

    def __init__(self, message: str, host: str, port: int, user: str) -> None:
        self.host = host
        self.port = port
        self.user = user
        super().__init__(message)
