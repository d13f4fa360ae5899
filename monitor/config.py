"""Configuration: the YAML file (docs: the configuration reference), validated by pydantic.

The core sections are declared here; ``detectors:`` is assembled from the
registered detector components' own config models.

Every key has an environment override ``RAG_MONITOR_<SECTION>__<KEY>``
(``__`` separates nesting levels); its value is read as a YAML scalar, so
``RAG_MONITOR_DETECTORS__LATENCY__QUANTILES='[0.5, 0.9]'`` works.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationError,
    create_model,
)
from pydantic_core import CoreSchema

from monitor.components import (
    CollectorComponent,
    DetectorComponent,
    load_collectors,
    load_components,
)
from monitor.guardrails import GuardrailsConfig
from monitor.kafka_connection import KafkaConnection
from monitor.section import Section
from monitor.service_config import Endpoint, ServiceConfig
from monitor.shared import SharedValues

ENV_PREFIX = "RAG_MONITOR_"


class Listener(Endpoint):
    """A receiver's port and the bounds both OTLP servers share."""

    enabled: bool = Field(True, description="start this receiver")
    max_connections: int = Field(
        1024,
        gt=0,
        description="open connections at most; at the bound HTTP closes the longest-idle "
        "keep-alive connection to make room, or else refuses the new one (503); gRPC refuses it",
    )
    handler_threads: int = Field(
        4, gt=0, description="requests decoded and submitted at once; complete requests wait"
    )
    idle_timeout_s: float = Field(
        60.0, gt=0, description="a keep-alive connection idle this long is closed"
    )


class HttpListener(Listener):
    """The OTLP/HTTP receiver's port and bounds."""

    header_timeout_s: float = Field(
        10.0, gt=0, description="a request's head must arrive whole within this (slowloris)"
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="a request's body must arrive whole within this after its head (a "
        "stalled body holds its share of the bytes-in-flight budget until then)",
    )
    max_header_bytes: int = Field(
        16_384, ge=1024, description="largest request head (request line + headers); else 431"
    )


class ComponentSections(Section):
    """A section with one key per registered component that has settings (``detectors:``,
    ``collectors:``). Its fields are not declared here: ``detectors_model`` and
    ``collectors_model`` assemble them from the components' config models
    (``monitor/components.py``), so adding a component edits no core module. Attribute
    access is typed ``Any``: a component reads its own section through its own model.
    """

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...


class DetectorsConfig(ComponentSections):
    """The ``detectors:`` section."""


class CollectorsConfig(ComponentSections):
    """The ``collectors:`` section."""


@functools.cache
def detectors_model() -> type[DetectorsConfig]:
    """The ``detectors:`` model: a field per component whose config model has fields."""
    sections = [(c.name, c.config_model, c.description) for c in load_components()]
    return _assembled("DetectorsConfig", DetectorsConfig, sections)


@functools.cache
def collectors_model() -> type[CollectorsConfig]:
    """The ``collectors:`` model: a field per section key of the registered collectors
    (``otlp_http`` and ``otlp_grpc`` share ``otlp``)."""
    sections = [(c.key, c.config_model, c.description) for c in load_collectors()]
    return _assembled("CollectorsConfig", CollectorsConfig, sections)


SectionsT = TypeVar("SectionsT", bound=ComponentSections)


def _assembled(
    name: str, base: type[SectionsT], sections: list[tuple[str, type[BaseModel], str]]
) -> type[SectionsT]:
    fields: dict[str, Any] = {}
    models: dict[str, type[BaseModel]] = {}
    for key, model, description in sections:
        if not model.model_fields:
            continue
        if models.setdefault(key, model) is not model:
            raise TypeError(f"components sharing the section {key!r} declare different models")
        fields[key] = (model, Field(default_factory=model, description=description))
    return create_model(name, __base__=base, **fields)


def _default_detectors() -> DetectorsConfig:
    return detectors_model()()


def _default_collectors() -> CollectorsConfig:
    return collectors_model()()


class _Assembled:
    """Validates a components' section with its assembled model, built on first use."""

    def __init__(self, model: Callable[[], type[ComponentSections]]) -> None:
        self.model = model

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return handler.generate_schema(self.model())


class Config(Section):
    # The ``collectors`` and ``detectors`` schemas need the registered components: build
    # them on first use, not at import, so that a component may import this module.
    model_config = ConfigDict(defer_build=True)

    service: ServiceConfig = Field(default_factory=ServiceConfig, description="the sidecar")
    collectors: Annotated[CollectorsConfig, _Assembled(collectors_model)] = Field(
        default_factory=_default_collectors, description="trace sources"
    )
    detectors: Annotated[DetectorsConfig, _Assembled(detectors_model)] = Field(
        default_factory=_default_detectors, description="detectors"
    )
    guardrails: GuardrailsConfig = Field(
        default_factory=GuardrailsConfig, description="alert thresholds"
    )


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


def detector_section(config: Config, component: DetectorComponent[Any]) -> Any:
    """The component's validated ``detectors:`` section (its defaults without settings)."""
    return getattr(config.detectors, component.name, None) or component.config_model()


def require_extras(config: Config) -> None:
    """Raise ``MissingExtraError`` (the ``pip install`` to run, the setting that would do
    without it) when a detector section enables what needs an extra that is not installed:
    the sidecar's start and ``check-config`` refuse the same configurations."""
    for component in load_components():
        component.require_extras(detector_section(config, component))


def shared_values(config: Config) -> SharedValues:
    """What the registered detectors provide for one another (``monitor.shared``), each
    from its own validated section; fails when two provide the same value."""
    return SharedValues(
        provision
        for component in load_components()
        for provision in component.provides(detector_section(config, component))
    )


def collector_section(config: Config, component: CollectorComponent[Any]) -> Any:
    """The component's validated ``collectors:`` section (its defaults without settings)."""
    return getattr(config.collectors, component.key, None) or component.config_model()


def kafka_connection(config: Config) -> KafkaConnection | None:
    """The brokers, security settings and consumer tuning every Kafka client of the
    sidecar uses: the collectors section that holds them (``collectors.kafka``), when
    its brokers are set."""
    for name in type(config.collectors).model_fields:
        section = getattr(config.collectors, name)
        if isinstance(section, KafkaConnection) and section.bootstrap_servers:
            return section
    return None


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
