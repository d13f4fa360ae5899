"""The feedback detector's registration (entry point ``rag_monitor.detectors: feedback``)."""

from __future__ import annotations

from detectors.feedback import alerting
from detectors.feedback.config import FeedbackConfig
from monitor.components import BuildContext, DetectorComponent
from monitor.detector import Detector


def _build(config: FeedbackConfig, context: BuildContext) -> Detector:
    from detectors.feedback.detector import FeedbackDetector

    return FeedbackDetector(context.registry)


COMPONENT = DetectorComponent(
    name="feedback",
    config_model=FeedbackConfig,
    description="user feedback and re-asks",
    build=_build,
    rules=alerting.rules,
    rows=alerting.rows,
    order=30,
)
