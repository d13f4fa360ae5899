"""The drift detector's registration (entry point ``rag_monitor.detectors: drift``)."""

from __future__ import annotations

from detectors.drift import alerting
from detectors.drift.commands import COMMANDS
from detectors.drift.config import DriftConfig
from monitor.components import BuildContext, DetectorComponent
from monitor.detector import Detector


def _build(config: DriftConfig, context: BuildContext) -> Detector:
    from detectors.drift.detector import DriftDetector

    return DriftDetector(config, context.state_dir, context.registry)


COMPONENT = DetectorComponent(
    name="drift",
    config_model=DriftConfig,
    description="query-embedding drift",
    build=_build,
    rules=alerting.rules,
    rows=alerting.rows,
    order=60,
    commands=COMMANDS,
)
