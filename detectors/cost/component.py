"""The cost detector's registration (entry point ``rag_monitor.detectors: cost``)."""

from __future__ import annotations

from detectors.cost import alerting
from detectors.cost.config import CostConfig
from monitor.components import BuildContext, DetectorComponent
from monitor.detector import Detector


def _build(config: CostConfig, context: BuildContext) -> Detector:
    from detectors.cost.detector import CostDetector

    return CostDetector(config, context.registry)


COMPONENT = DetectorComponent(
    name="cost",
    config_model=CostConfig,
    description="cost per query",
    build=_build,
    rules=alerting.rules,
    rows=alerting.rows,
    order=20,
)
