"""The filter-exclusion detector's registration (``rag_monitor.detectors: filter_exclusion``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from detectors.filter_exclusion import alerting
from detectors.filter_exclusion.config import FilterExclusionConfig
from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.shared import SLICER

if TYPE_CHECKING:
    from monitor.contract.rulekit.simulation import SimulatedWorld


def _build(config: FilterExclusionConfig, context: BuildContext) -> Detector:
    from detectors.filter_exclusion.detector import FilterExclusionDetector

    # Each decision goes back into the pipeline as an ExclusionOutcome (shadow comparison).
    return FilterExclusionDetector(
        config, context.registry, emit=context.emit, slicer=context.shared[SLICER]
    )


def _fields(config: FilterExclusionConfig, guardrails: GuardrailsConfig) -> tuple[str, ...]:
    """Gold documents are matched against the retrieved ids."""
    return ("retrieved_ids",)


def _simulate(
    config: FilterExclusionConfig, guardrails: GuardrailsConfig, world: SimulatedWorld
) -> None:
    from detectors.filter_exclusion.simulate import series

    series(config, guardrails, world)


COMPONENT = DetectorComponent(
    name="filter_exclusion",
    config_model=FilterExclusionConfig,
    description="relevance-filter false exclusions",
    build=_build,
    fields=_fields,
    rules=alerting.rules,
    rows=alerting.rows,
    order=50,
    simulate=_simulate,
    incidents=("false_exclusion",),
)
