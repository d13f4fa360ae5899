"""The slices detector's registration (entry point ``rag_monitor.detectors: slices``)."""

from __future__ import annotations

from detectors.slices import alerting
from detectors.slices.config import SlicesConfig
from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector
from monitor.contract.shared import SLICER, Provision


def _build(config: SlicesConfig, context: BuildContext) -> Detector:
    from detectors.slices.detector import SlicesDetector

    return SlicesDetector(config, context.registry)


def _provides(config: SlicesConfig) -> list[Provision]:
    return [SLICER.provide(config.slicer())]


COMPONENT = DetectorComponent(
    name="slices",
    config_model=SlicesConfig,
    description="intent and document-type slices: every guardrail by slice (tickets), "
    "regeneration rate by intent, coverage matrix",
    build=_build,
    rules=alerting.rules,
    rows=alerting.rows,
    provides=_provides,
    order=35,
)
