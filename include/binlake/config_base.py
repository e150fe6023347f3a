"""The base of every pipeline config model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Model(BaseModel):
    """Strict base: unknown keys are errors; configs are values, so frozen."""

    # Fields are documented by the docstring under each: pydantic keeps it as the description, which
    # the generated configuration reference (docs/configuration.md) shows.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
