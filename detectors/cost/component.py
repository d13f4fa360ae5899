"""The cost detector's registration (entry point ``rag_monitor.detectors: cost``)."""

from __future__ import annotations

from detectors.cost import alerting
from detectors.cost.config import CostConfig
from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.shared import SLICER


def _build(config: CostConfig, context: BuildContext) -> Detector:
    from detectors.cost.detector import CostDetector

    return CostDetector(config, context.registry, context.shared[SLICER])


def _fields(config: CostConfig, guardrails: GuardrailsConfig) -> tuple[str, ...]:
    """Cost is priced from the tokens the models reported."""
    return ("usage",)


COMPONENT = DetectorComponent(
    name="cost",
    config_model=CostConfig,
    description="cost per query",
    build=_build,
    fields=_fields,
    rules=alerting.rules,
    rows=alerting.rows,
    order=20,
)
