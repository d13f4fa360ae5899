"""The latency detector's registration (entry point ``rag_monitor.detectors: latency``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from detectors.latency import alerting
from detectors.latency.config import LatencyConfig
from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector
from monitor.contract.field_presence import stage_field
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.shared import SLICER

if TYPE_CHECKING:
    from monitor.contract.rulekit.simulation import SimulatedWorld


def _build(config: LatencyConfig, context: BuildContext) -> Detector:
    from detectors.latency.detector import LatencyDetector

    slo = {
        stage: objective.threshold_s for stage, objective in context.guardrails.latency_slo.items()
    }
    return LatencyDetector(config, context.registry, slo_stages=slo, slicer=context.shared[SLICER])


def _fields(config: LatencyConfig, guardrails: GuardrailsConfig) -> tuple[str, ...]:
    """The stages with a latency SLO (total is every request's own duration)."""
    return tuple(stage_field(stage) for stage in guardrails.latency_slo if stage != "total")


def _simulate(config: LatencyConfig, guardrails: GuardrailsConfig, world: SimulatedWorld) -> None:
    from detectors.latency.simulate import series

    series(config, guardrails, world)


COMPONENT = DetectorComponent(
    name="latency",
    config_model=LatencyConfig,
    description="stage latency",
    build=_build,
    fields=_fields,
    rules=alerting.rules,
    rows=alerting.rows,
    order=10,
    simulate=_simulate,
    incidents=("latency",),
)
