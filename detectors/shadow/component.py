"""The shadow comparison's registration (entry point ``rag_monitor.detectors: shadow``)."""

from __future__ import annotations

from detectors.shadow import alerting
from detectors.shadow.config import ShadowConfig
from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector
from monitor.contract.shared import REVIEW_ENABLED


def _build(config: ShadowConfig, context: BuildContext) -> Detector:
    from detectors.shadow.detector import ShadowDetector

    service = context.service
    return ShadowDetector(
        config,
        context.registry,
        service.state_dir,
        kafka=context.kafka,
        variants=service.variants,
        # Text is kept only where the review queue keeps it already.
        keep_text=context.shared[REVIEW_ENABLED],
        state_max_bytes=service.state_max_bytes,
    )


COMPONENT = DetectorComponent(
    name="shadow",
    config_model=ShadowConfig,
    description="shadow comparison: paired deltas of production requests and their twins",
    build=_build,
    rows=alerting.rows,
    order=75,
)
