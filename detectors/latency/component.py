"""The latency detector's registration (entry point ``rag_monitor.detectors: latency``)."""

from __future__ import annotations

from detectors.latency import alerting
from detectors.latency.config import LatencyConfig
from monitor.components import BuildContext, DetectorComponent
from monitor.detector import Detector


def _build(config: LatencyConfig, context: BuildContext) -> Detector:
    from detectors.latency.detector import LatencyDetector

    return LatencyDetector(config, context.registry)


COMPONENT = DetectorComponent(
    name="latency",
    config_model=LatencyConfig,
    description="stage latency",
    build=_build,
    rules=alerting.rules,
    rows=alerting.rows,
    order=10,
)
