"""The base of every pipeline config model."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict, Field


def compile_regex(value: str) -> str:
    """``value`` if it compiles as a regular expression (a config's table patterns)."""
    try:
        re.compile(value)
    except re.error as e:
        raise ValueError(f"not a valid regular expression ({e})") from e
    return value


#: A rule's ``source_table``: a regular expression over ``database.table`` (full match).
TableRegex = Annotated[str, Field(min_length=1), AfterValidator(compile_regex)]


class Model(BaseModel):
    """Strict base: unknown keys are errors; configs are values, so frozen."""

    # Fields are documented by the docstring under each: pydantic keeps it as the description, which
    # the generated configuration reference (docs/configuration.md) shows.
    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)
