"""The root configuration model: what a component reads of the whole configuration.

The core sections are declared in their own modules (``service:``, ``guardrails:``);
``detectors:`` and ``collectors:`` are assembled here from the registered components'
own config models. Reading the YAML file and the environment is the runtime's
(``monitor/runtime/config_loading.py``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, create_model
from pydantic_core import CoreSchema

from monitor.contract.components import (
    CollectorComponent,
    DetectorComponent,
    load_collectors,
    load_components,
)
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.kafka_connection import KafkaConnection
from monitor.contract.section import Section
from monitor.contract.service_config import ServiceConfig
from monitor.contract.shared import SharedValues


class ComponentSections(Section):
    """A section with one key per registered component that has settings (``detectors:``,
    ``collectors:``). Its fields are not declared here: ``detectors_model`` and
    ``collectors_model`` assemble them from the components' config models
    (``monitor/contract/components.py``), so adding a component edits no core module. Attribute
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
    """What the registered detectors provide for one another (``monitor.contract.shared``), each
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
