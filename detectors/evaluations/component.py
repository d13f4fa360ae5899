"""The evaluations detector's registration (``rag_monitor.detectors: evaluations``)."""

from __future__ import annotations

from detectors.evaluations import alerting
from detectors.evaluations.config import EvaluationsConfig
from monitor.components import BuildContext, DetectorComponent
from monitor.detector import Detector


def _build(config: EvaluationsConfig, context: BuildContext) -> Detector:
    from detectors.evaluations.detector import EvaluationsDetector
    from detectors.evaluations.emit import EvaluationEmitter

    emitter = None if config.emit is None else EvaluationEmitter(config.emit)
    return EvaluationsDetector(config, context.registry, emitter)


COMPONENT = DetectorComponent(
    name="evaluations",
    config_model=EvaluationsConfig,
    description="evaluators' verdicts (gen_ai.evaluation.result, OpenInference annotations)",
    build=_build,
    rules=alerting.rules,
    rows=alerting.rows,
    order=45,
)
