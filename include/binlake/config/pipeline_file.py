"""A pipeline YAML file → a ``PipelineConfig`` (``config``'s models): ``${ENV_VAR}`` and
``${ENV_VAR:-default}`` references filled in after YAML parsing (a password with ``#`` or ``: ``
cannot break the file), a job's source settings from its environment, and errors that name every
problem's key path, the value found (secrets hidden) and what is valid.
"""

from __future__ import annotations

import difflib
import os
import re
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from binlake.config.pipeline import PipelineConfig, PipelineSection
from binlake.errors import ConfigError

# `$${` is a literal `${` (a password may hold one); otherwise `${NAME}` or `${NAME:-default}`.
_ENV_REF = re.compile(r"\$\$(?=\{)|\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?::-(?P<default>[^}]*))?\}")
_SECRET_KEYS = frozenset({"password"})


#: Source settings a job takes from its environment (an Airflow connection's, handed to a
#: spark-submit process without putting the password on its command line).
SOURCE_ENV = {
    "hostname": "BINLAKE_SOURCE_HOSTNAME",
    "port": "BINLAKE_SOURCE_PORT",
    "username": "BINLAKE_SOURCE_USERNAME",
    "password": "BINLAKE_SOURCE_PASSWORD",
}


def source_from_env(environ: dict[str, str] | None = None) -> dict[str, Any] | None:
    """The ``BINLAKE_SOURCE_*`` settings present in the environment (None: none is)."""
    env = os.environ if environ is None else environ
    found = {key: env[name] for key, name in SOURCE_ENV.items() if env.get(name)}
    return found or None


def load_config(
    path: str | os.PathLike[str],
    environ: dict[str, str] | None = None,
    source_overrides: dict[str, Any] | None = None,
) -> PipelineConfig:
    """Read, interpolate and validate a pipeline YAML file.

    ``source_overrides`` replace keys of the ``source`` section (an Airflow connection's host,
    port, login and password).

    Raises:
        ConfigError: the file is missing or unreadable, not valid YAML, names an unset
            environment variable, or breaks the schema; the message gives every problem's
            key path, the value found (secrets hidden) and what is valid.
    """
    file = Path(path)
    env = os.environ.copy() if environ is None else environ
    return parse_config(_read(file), str(file), env, source_overrides)


def _read(file: Path) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"the file does not exist (looked in {file.resolve().parent})", str(file)) from None
    except OSError as e:
        raise ConfigError(f"the file cannot be read: {e.strerror}", str(file)) from None


def load_pipeline_section(
    path: str | os.PathLike[str], environ: dict[str, str] | None = None
) -> PipelineSection:
    """Only the file's ``pipeline`` section, interpolated and validated: what a process needs that
    cannot complete the rest (the Airflow API server serving reports has no source connection).

    Raises:
        ConfigError: the file cannot be read, or its ``pipeline`` section is not valid.
    """
    file = Path(path)
    section = _sections(_read(file), str(file)).get("pipeline")
    env = os.environ.copy() if environ is None else environ
    data = {
        "pipeline": _interpolate(section if isinstance(section, dict) else {}, env, ("pipeline",), str(file))
    }
    try:
        return _PipelineOnly.model_validate(data).pipeline
    except ValidationError as e:
        raise ConfigError(_validation_text(e, data), str(file)) from None


class _PipelineOnly(BaseModel):
    """A config file's ``pipeline`` section, the rest ignored (errors keep their full key path)."""

    model_config = ConfigDict(extra="ignore")
    pipeline: PipelineSection


def parse_config(
    text: str, source_name: str, environ: dict[str, str], source_overrides: dict[str, Any] | None = None
) -> PipelineConfig:
    """Validate a pipeline config given as YAML text (see :func:`load_config`)."""
    data = _interpolate(_sections(text, source_name), environ, (), source_name)
    if source_overrides and isinstance(data.get("source"), dict):
        data["source"] = {**data["source"], **source_overrides}
    try:
        return PipelineConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError(_validation_text(e, data), source_name) from None


def _sections(text: str, source_name: str) -> dict[str, Any]:
    """The YAML text's top-level mapping of sections."""
    try:
        raw = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as e:
        raise ConfigError(_yaml_error_text(e), source_name) from None
    if raw is None:
        raise ConfigError("the file is empty; it needs at least `pipeline` and `source`", source_name)
    if not isinstance(raw, dict):
        raise ConfigError(
            f"the top level must be a mapping of sections, found {type(raw).__name__}", source_name
        )
    return raw


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML would keep the last
    silently: a second `password:` further down would win unseen)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key `{key}` is given twice, at lines {seen[key]} and {line}: keep one",
                    key_node.start_mark,
                )  # fmt: skip
            seen[key] = line
        return super().construct_mapping(node, deep=deep)


def _yaml_error_text(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return (
        f"not valid YAML{where}: {problem}. Fix the syntax there (check indentation, "
        "unclosed quotes or brackets, and a space after each `:`)."
    )


def _interpolate(value: Any, environ: dict[str, str], path: tuple[str, ...], source: str) -> Any:
    if isinstance(value, dict):
        return {k: _interpolate(v, environ, (*path, str(k)), source) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolate(v, environ, (*path, str(i)), source) for i, v in enumerate(value)]
    if isinstance(value, str):

        def replace(match: re.Match[str]) -> str:
            name, default = match.group("name"), match.group("default")
            if name is None:  # `$${`: the escape of a literal `${`
                return "$"
            if name in environ:
                return environ[name]
            if default is not None:
                return default
            raise ConfigError(
                f"`{'.'.join(path)}` refers to the environment variable `{name}`, which is not set. "
                f"Fix: export {name}=…, or write `${{{name}:-default}}` to give a default.",
                source,
            )

        return _ENV_REF.sub(replace, value)
    return value


def _validation_text(error: ValidationError, data: Any) -> str:
    problems = [_problem_text(e, data) for e in error.errors()]
    count = f"{len(problems)} problems" if len(problems) > 1 else "1 problem"
    return f"{count}:\n" + "\n".join(f"  - {p}" for p in problems)


def _problem_text(err: Any, data: Any) -> str:
    loc = tuple(str(part) for part in err["loc"] if not str(part).startswith("function-"))
    # pydantic puts union/validator names into loc; keep only real keys.
    key_path = ".".join(loc) or "(top level)"
    kind = err["type"]
    if kind == "extra_forbidden":
        parent = _model_at(loc[:-1])
        valid = sorted(parent.model_fields) if parent else []
        close = difflib.get_close_matches(loc[-1], valid, n=1)
        hint = f" Did you mean `{close[0]}`?" if close else ""
        return f"`{key_path}`: unknown key.{hint} Valid keys here: {', '.join(valid)}."
    if kind == "missing":
        return f"`{key_path}`: required key is missing. Add it to the config."
    found = _found(loc, err.get("input"))
    msg = err["msg"].removeprefix("Value error, ")
    if kind == "literal_error":
        expected = err.get("ctx", {}).get("expected", "")
        return f"`{key_path}`: found {found}; valid values: {expected}."
    return f"`{key_path}`: found {found}; {msg[0].lower()}{msg[1:]}."


def _found(loc: tuple[str, ...], value: Any) -> str:
    if any(part in _SECRET_KEYS for part in loc):
        return "a value (hidden: it is a secret)"
    if isinstance(value, dict):
        return "a mapping"
    text = repr(value) if not isinstance(value, str) else value
    return f"`{text[:200]}`"


def _model_at(loc: tuple[str, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] = PipelineConfig
    for part in loc:
        if part.isdigit():
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        sub = _model_type(field.annotation)
        if sub is None:
            return None
        model = sub
    return model


def _model_type(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_type(arg)
        if found is not None:
            return found
    return None
