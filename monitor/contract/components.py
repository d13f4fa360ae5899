"""Components: what a detector or collector package registers so that the sidecar, the
configuration, the alert rules and the dashboard find it without edits elsewhere.

A package registers one ``DetectorComponent`` under the entry-point group
``rag_monitor.detectors`` (``[project.entry-points."rag_monitor.detectors"]`` in
its pyproject). The entry point's name is the component's config key under
``detectors:``. A collector registers a ``CollectorComponent`` under
``rag_monitor.collectors``; its config key under ``collectors:`` is its ``section``
(else its name). The core never imports a detector or a collector: it loads the
registered components here and asks each for its config model, its detector or
receiver, its rules and its panels.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from monitor.contract.detector import Detector
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.kafka_connection import KafkaConnection
from monitor.contract.rulekit.fragments import Row, RuleFragment
from monitor.contract.service_config import ServiceConfig
from monitor.contract.shared import Provision, SharedValues
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Event
from monitor.contract.work_items import PIPELINE_THREAD, Consumer, Events, TraceAssembly

if TYPE_CHECKING:  # numpy loads only when a backtest simulates
    from monitor.contract.rulekit.simulation import SimulatedWorld

# A component's own validated config section: every hook of the component takes it typed.
SectionT = TypeVar("SectionT", bound=BaseModel)

ENTRY_POINT_GROUP = "rag_monitor.detectors"
COLLECTOR_GROUP = "rag_monitor.collectors"


# How long an emitted event may wait for room in the pipeline queue before it is dropped
# (counted as rag_monitor_records_total{collector="internal",outcome="skipped"}).
EMIT_TIMEOUT_S = 1.0


class EventHook:
    """How a detector puts events into the pipeline: ``hook(event)`` queues it for every
    detector's ``observe_event`` (on the pipeline thread), counted under the collector
    ``internal``. Bound by the sidecar once the pipeline exists; before that, and when the
    queue stays full for ``EMIT_TIMEOUT_S``, the event is dropped and False returned.

    Called on the pipeline thread itself (from ``observe`` or ``observe_event``), the event
    is queued only if there is room at once: that thread is the queue's only consumer, so
    waiting there would stall every trace behind it.
    """

    def __init__(self) -> None:
        self._consumer: Consumer | None = None
        self._lock = threading.Lock()

    def bind(self, consumer: Consumer) -> None:
        with self._lock:
            self._consumer = consumer

    def __call__(self, event: Event) -> bool:
        with self._lock:
            consumer = self._consumer
        if consumer is None:
            return False
        on_pipeline = threading.current_thread().name == PIPELINE_THREAD
        timeout = 0.0 if on_pipeline else EMIT_TIMEOUT_S
        if consumer.submit(Events((event,), "internal"), timeout=timeout):
            return True
        consumer.metrics.count_record("internal", "skipped")
        return False


def write_token(auth_token_env: str | None) -> str | None:
    """The bearer token the write endpoints require (``service.auth_token_env``);
    None when none is configured. Fails at start-up if the variable is unset, empty or only
    whitespace: a blank secret must not pass for a token."""
    if auth_token_env is None:
        return None
    token = os.environ.get(auth_token_env)
    if token is None or not token.strip():
        raise ValueError(
            f"service.auth_token_env names {auth_token_env!r}, "
            "but that environment variable is unset, empty or only whitespace"
        )
    return token


@dataclass(frozen=True)
class BuildContext:
    """What a component may need beside its own config section to build its detector: the
    core's sections, and what other components provide. Never another component's section:
    a value one detector needs from another is declared in ``monitor.contract.shared``."""

    registry: SidecarRegistry
    service: ServiceConfig  # the ``service:`` section (state_dir, state_max_bytes, variants)
    guardrails: GuardrailsConfig  # the ``guardrails:`` section
    # What the registered components provide for one another (``DetectorComponent.provides``).
    shared: SharedValues
    # Puts events into the pipeline (JudgeScore, review labels); bound by the sidecar.
    emit: Callable[[Event], bool] = field(default_factory=EventHook)
    # The bearer token of the write endpoints, for a detector serving its own page.
    token: str | None = None
    # The Kafka connection (collectors.kafka) when brokers are set: a detector shares its
    # records between replicas through it (review queue, shadow pairs, remote judging).
    kafka: KafkaConnection | None = None


@dataclass(frozen=True)
class ModelNeed:
    """One model repository a detector reads from disk, for ``rag-monitor models fetch``.

    The files of ``repo`` at ``revision`` (a commit hash where the detector pins
    one) matching ``files``, plus the first of ``weights`` (alternatives, best
    first) that the repository holds. Fetched to a directory, the copy goes to
    ``directory`` under it and the section's key ``setting``, when given, is set
    to that path.
    """

    repo: str
    revision: str
    files: tuple[str, ...]
    directory: str
    weights: tuple[str, ...] = ()
    setting: str | None = None


@dataclass(frozen=True)
class ModelSupport(Generic[SectionT]):
    """How a detector's models are fetched and checked; each callable takes its section.

    ``needs``: what to fetch under this section (empty when nothing is read
    from the hub). ``load``: load them exactly as the detector does, raising
    when they do not load. ``missing``: without heavy imports, one line per
    model that is not on this machine.
    """

    needs: Callable[[SectionT], Sequence[ModelNeed]]
    load: Callable[[SectionT], None]
    missing: Callable[[SectionT], list[str]]


# The defaults of the hooks a component need not give: any section will do.
def _no_rules(config: object, guardrails: GuardrailsConfig) -> RuleFragment:
    return RuleFragment()


def _no_rows(config: object, guardrails: GuardrailsConfig) -> list[Row]:
    return []


def _no_fields(config: object, guardrails: GuardrailsConfig) -> Collection[str]:
    return ()


def _no_series(config: object, guardrails: GuardrailsConfig, world: SimulatedWorld) -> None:
    return None


def _no_metrics(registry: SidecarRegistry) -> None:
    return None


def _no_extras(config: object) -> None:
    return None


def _provides_nothing(config: object) -> Sequence[Provision]:
    return ()


@dataclass(frozen=True)
class DetectorComponent(Generic[SectionT]):
    """A registered detector: its config model, how to build it, its rules and panels.

    ``order`` places its rules and dashboard rows among the others (lower first).
    ``rules``, ``rows`` and ``fields`` take the component's own validated config section
    and the root ``guardrails`` section. ``fields`` names the ``RagTrace`` fields its
    detector reads as configured (``monitor.contract.field_presence.PRESENT``; none when the section
    turns it off): the field-coverage ticket watches them.

    ``simulate`` adds its detector's series to the synthetic world of ``rag-monitor rules
    backtest --simulate`` (``monitor.contract.rulekit.simulation``), given its section, the root
    ``guardrails`` and the world; ``incidents`` names the incident kinds it reacts to
    (``--incident KIND:START:DURATION``), which it reads with ``world.during(kind)``.
    ``late_metrics`` declares on a registry the metric families its detector declares only
    once it runs (a model loaded, a page started, a judge other than the default), so that
    the metrics reference lists them with the rest. ``require_extras`` takes the section
    and raises ``monitor.contract.extras.MissingExtraError`` when what it enables needs an extra
    that is not installed; the sidecar asks before it builds, ``check-config`` asks too.

    ``provides`` takes the component's validated section and returns what it provides for
    other components (``monitor.contract.shared``: ``KEY.provide(value)`` for each key it owns); a
    component that needs such a value reads ``BuildContext.shared[KEY]``.
    """

    name: str
    config_model: type[SectionT]
    description: str
    build: Callable[[SectionT, BuildContext], Detector]
    rules: Callable[[SectionT, GuardrailsConfig], RuleFragment] = _no_rules
    rows: Callable[[SectionT, GuardrailsConfig], list[Row]] = _no_rows
    order: int = 100
    # models read from disk (``rag-monitor models fetch``)
    models: ModelSupport[SectionT] | None = None
    fields: Callable[[SectionT, GuardrailsConfig], Collection[str]] = _no_fields
    simulate: Callable[[SectionT, GuardrailsConfig, SimulatedWorld], None] = _no_series
    incidents: tuple[str, ...] = ()
    late_metrics: Callable[[SidecarRegistry], None] = _no_metrics
    require_extras: Callable[[SectionT], None] = _no_extras
    provides: Callable[[SectionT], Sequence[Provision]] = _provides_nothing


class Receiver(Protocol):
    """What a collector component builds: a source of work for the pipeline."""

    @property
    def port(self) -> int | None:
        """The bound port of a listening receiver; None for a client (Kafka)."""

    @property
    def max_connections(self) -> int:
        """Connections it may hold open at once (for the open-file limit); 0 for a client."""

    def start(self) -> None: ...
    def stop_intake(self) -> None: ...
    def shutdown(self) -> None: ...
    def ready(self) -> bool: ...


@dataclass(frozen=True)
class CollectorContext:
    """What a collector's ``build`` gets besides its own config section."""

    consumer: Consumer  # the pipeline; its metrics' registry takes the collector's own
    token: str | None  # the bearer token write endpoints require (service.auth_token_env)


def _no_receiver(config: object, context: CollectorContext) -> Receiver | None:
    return None


@dataclass(frozen=True)
class CollectorComponent(Generic[SectionT]):
    """A registered collector (entry-point group ``rag_monitor.collectors``).

    Its settings are ``collectors.<section>`` (``section`` defaults to the name;
    components that share a section, like the two OTLP receivers, declare the same
    ``config_model``). ``build`` takes that validated section and a ``CollectorContext``
    and returns its receiver, or None when the section leaves it off. The one component
    with ``assembly`` turns spans into ``RagTrace`` values for the pipeline; it takes
    the same section. ``rules`` and ``rows`` (the section and the root ``guardrails``)
    put its alerts and panels after the detectors' in the rule file and the dashboard.
    """

    name: str
    config_model: type[SectionT]
    description: str = ""
    section: str = ""
    build: Callable[[SectionT, CollectorContext], Receiver | None] = _no_receiver
    assembly: Callable[[SectionT], TraceAssembly] | None = None
    rules: Callable[[SectionT, GuardrailsConfig], RuleFragment] = _no_rules
    rows: Callable[[SectionT, GuardrailsConfig], list[Row]] = _no_rows
    order: int = 100

    @property
    def key(self) -> str:
        """Its config key under ``collectors:``."""
        return self.section or self.name


ComponentT = TypeVar("ComponentT", DetectorComponent[Any], CollectorComponent[Any])


def _load(group: str, kind: type[ComponentT]) -> list[ComponentT]:
    components = []
    for entry in entry_points(group=group):
        component = entry.load()
        if not isinstance(component, kind) or component.name != entry.name:
            raise TypeError(
                f"entry point {entry.name} = {entry.value} in {group} must be a "
                f"{kind.__name__} named {entry.name!r}"
            )
        components.append(component)
    return sorted(components, key=lambda component: (component.order, component.name))


def load_components() -> Sequence[DetectorComponent[Any]]:
    """The registered detectors, by ``order`` then name; fails naming a bad entry point."""
    return _load(ENTRY_POINT_GROUP, DetectorComponent)


def load_collectors() -> Sequence[CollectorComponent[Any]]:
    """The registered collectors, by ``order`` then name; fails naming a bad entry point."""
    return _load(COLLECTOR_GROUP, CollectorComponent)
