"""The base of every pipeline config model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """Strict base: unknown keys are errors; configs are values, so frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)
