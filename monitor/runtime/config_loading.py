"""Loading the configuration: the YAML file (docs: the configuration reference) and the
environment, validated by the root model (``monitor/contract/config.py``).

Every key has an environment override ``RAG_MONITOR_<SECTION>__<KEY>``
(``__`` separates nesting levels); its value is read as a YAML scalar, so
``RAG_MONITOR_DETECTORS__LATENCY__QUANTILES='[0.5, 0.9]'`` works.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from monitor.contract.config import Config

ENV_PREFIX = "RAG_MONITOR_"


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` lists every error with its key path."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


def load_config(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (or the defaults), apply environment overrides, and validate."""
    source = str(path) if path else "defaults"
    raw: Any = {}
    if path is not None:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
            raise ConfigError(source, [f"cannot read: {exc}"]) from exc
        if not isinstance(raw, dict):
            raise ConfigError(source, ["the top level must be a mapping"])
    apply_env_overrides(raw, os.environ if environ is None else environ)
    moved = list(_moved_keys(raw))
    if moved:
        raise ConfigError(source, moved)
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(source, list(_describe_errors(exc))) from exc


# Keys that moved (docs: Changes): old dotted path -> new one.
MOVED_KEYS = {
    "assembly": "collectors.spans.assembly",
    "mapping": "collectors.spans.mapping",
    "collectors.otlp.auth_token_env": "service.auth_token_env",
    "collectors.phoenix": "detectors.faithfulness.phoenix",
}


# Keys retired (docs: Changes): old dotted path -> what replaces it.
RETIRED_KEYS = {
    "detectors.faithfulness.remote.floor_window_s": "the scorers keep the floor at an even "
    "rate over the hour; detectors.faithfulness.remote.floor_burst_s bounds what they save",
}


def _moved_keys(raw: Mapping[str, Any]) -> Iterator[str]:
    """One problem per moved or retired key the file (or the environment) still sets."""
    problems = {old: f"moved to {new}" for old, new in MOVED_KEYS.items()}
    problems |= {old: f"retired: {why}" for old, why in RETIRED_KEYS.items()}
    for old, problem in problems.items():
        node: Any = raw
        for key in old.split("."):
            node = node.get(key) if isinstance(node, Mapping) else None
        if node is not None:
            yield f"{old}: {problem} (docs: Changes)"


def apply_env_overrides(raw: dict[str, Any], environ: Mapping[str, str]) -> None:
    """Set ``RAG_MONITOR_A__B__C=value`` as ``raw[a][b][c] = yaml(value)``."""
    for name, value in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or "__" not in name[len(ENV_PREFIX) :]:
            continue
        keys = [key.lower() for key in name[len(ENV_PREFIX) :].split("__")]
        node = raw
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        try:
            node[keys[-1]] = yaml.safe_load(value)
        except yaml.YAMLError:
            node[keys[-1]] = value


def _describe_errors(exc: ValidationError) -> Iterator[str]:
    for error in exc.errors():
        path = ".".join(str(part) for part in error["loc"])
        # A mapping is not echoed: it can hold passwords (collectors.kafka.security).
        shown = error["type"] != "missing" and not isinstance(error["input"], dict)
        got = f" (got {error['input']!r})" if shown else ""
        if error["type"] == "extra_forbidden":
            yield f"{path}: unknown key"
        else:
            yield f"{path}: {error['msg']}{got}"


@dataclass(frozen=True)
class ConfigKey:
    """One key of the configuration: its dotted path, its default (None for a section,
    which has keys of its own) and its one-line description."""

    path: str
    default: Any
    description: str
    section: bool


def config_keys(defaults: BaseModel | None = None, prefix: str = "") -> Iterator[ConfigKey]:
    """Every key, sections before their keys, in declaration order: what ``--explain``
    prints and the docs site's configuration reference lists.

    Defaults are read from a default instance, not from the field declarations:
    a parent's ``default_factory`` (``Listener(port=4318)``) overrides the
    nested model's own field defaults.
    """
    instance = Config() if defaults is None else defaults
    for name, field in type(instance).model_fields.items():
        key = f"{prefix}{field.alias or name}"
        value = getattr(instance, name)
        description = field.description or ""
        if isinstance(value, BaseModel):
            yield ConfigKey(key, None, description, section=True)
            yield from config_keys(value, key + ".")
        else:
            if isinstance(value, dict) and any(isinstance(v, BaseModel) for v in value.values()):
                # a map of sections (guardrails.latency_slo) reads as the YAML it came from
                value = {k: v.model_dump(by_alias=True) for k, v in value.items()}
            yield ConfigKey(key, value, description, section=False)


def explain() -> Iterator[str]:
    """Yield ``key: default  # description`` for every key, for ``check-config --explain``."""
    for key in config_keys():
        if key.section:
            yield f"{key.path}:  # {key.description}"
        else:
            yield f"{key.path}: {key.default!r}  # {key.description}"
