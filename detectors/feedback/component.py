"""The feedback detector's registration (entry point ``rag_monitor.detectors: feedback``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from detectors.feedback import alerting
from detectors.feedback.config import FeedbackConfig
from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector
from monitor.contract.guardrails import GuardrailsConfig

if TYPE_CHECKING:
    from monitor.contract.rulekit.simulation import SimulatedWorld


def _build(config: FeedbackConfig, context: BuildContext) -> Detector:
    from detectors.feedback.detector import FeedbackDetector

    return FeedbackDetector(context.registry)


def _simulate(config: FeedbackConfig, guardrails: GuardrailsConfig, world: SimulatedWorld) -> None:
    from detectors.feedback.simulate import series

    series(config, guardrails, world)


COMPONENT = DetectorComponent(
    name="feedback",
    config_model=FeedbackConfig,
    description="user feedback and re-asks",
    build=_build,
    rules=alerting.rules,
    rows=alerting.rows,
    order=30,
    simulate=_simulate,
    incidents=("regeneration",),
)
