"""The evaluations detector's registration (``rag_monitor.detectors: evaluations``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from detectors.evaluations import alerting
from detectors.evaluations.config import EvaluationsConfig
from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.shared import COMPARED_WITH_REVIEW, Provision

if TYPE_CHECKING:
    from monitor.contract.rulekit.simulation import SimulatedWorld


def _build(config: EvaluationsConfig, context: BuildContext) -> Detector:
    from detectors.evaluations.detector import EvaluationsDetector
    from monitor.contract.verdict_exports.otlp_logs import EvaluationEmitter

    emitter = None if config.emit is None else EvaluationEmitter(config.emit)
    return EvaluationsDetector(config, context.registry, emitter)


def _provides(config: EvaluationsConfig) -> list[Provision]:
    """The pass rules of the evaluations set compare_with_review, for the review detector."""
    compared = {
        name: rule.passes for name, rule in config.evaluations.items() if rule.compare_with_review
    }
    return [COMPARED_WITH_REVIEW.provide(compared)]


def _simulate(
    config: EvaluationsConfig, guardrails: GuardrailsConfig, world: SimulatedWorld
) -> None:
    from detectors.evaluations.simulate import series

    series(config, guardrails, world)


COMPONENT = DetectorComponent(
    name="evaluations",
    config_model=EvaluationsConfig,
    description="evaluators' verdicts (gen_ai.evaluation.result, OpenInference annotations)",
    build=_build,
    rules=alerting.rules,
    rows=alerting.rows,
    order=45,
    simulate=_simulate,
    incidents=("evaluation",),
    provides=_provides,
)
