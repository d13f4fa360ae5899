"""The release detector's registration (entry point ``rag_monitor.detectors: release``)."""

from __future__ import annotations

from detectors.release import alerting
from detectors.release.config import ReleaseConfig
from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector


def _build(config: ReleaseConfig, context: BuildContext) -> Detector:
    from detectors.release.detector import ReleaseDetector

    return ReleaseDetector(config, context.registry)


COMPONENT = DetectorComponent(
    name="release",
    config_model=ReleaseConfig,
    description="service releases (service.version) for alert triage",
    build=_build,
    rows=alerting.rows,
    order=15,
)
