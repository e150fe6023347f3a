"""The result of one check of ``binlake validate``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

Status = Literal["ok", "warning", "error"]


@dataclass(frozen=True)
class Check:
    """The result of one check."""

    name: str
    status: Status
    message: str
    fix: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)
