"""The faithfulness detector's registration (``rag_monitor.detectors: faithfulness``)."""

from __future__ import annotations

from detectors.faithfulness import alerting
from detectors.faithfulness.config import FaithfulnessConfig
from monitor.components import BuildContext, DetectorComponent
from monitor.detector import Detector


def _build(config: FaithfulnessConfig, context: BuildContext) -> Detector:
    from detectors.faithfulness.detector import FaithfulnessDetector

    # Annotations go to Phoenix, whose connection is a collectors setting.
    return FaithfulnessDetector(config, context.registry, context.root.collectors.phoenix)


COMPONENT = DetectorComponent(
    name="faithfulness",
    config_model=FaithfulnessConfig,
    description="sampled HHEM faithfulness",
    build=_build,
    rules=alerting.rules,
    rows=alerting.rows,
    order=40,
)
