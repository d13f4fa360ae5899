"""The review detector's registration (entry point ``rag_monitor.detectors: review``)."""

from __future__ import annotations

from detectors.review import alerting
from detectors.review.config import ReviewConfig
from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.shared import COMPARED_WITH_REVIEW, REVIEW_ENABLED, SLICER, Provision
from monitor.contract.sidecar_registry import SidecarRegistry


def _build(config: ReviewConfig, context: BuildContext) -> Detector:
    from detectors.review.detector import ReviewDetector

    # The pass rules of the evaluations compared with review are the evaluations detector's
    # to say; the core hands them over with the service settings.
    return ReviewDetector(
        config,
        context.registry,
        context.service.state_dir,
        kafka=context.kafka,
        emit=context.emit,
        token=context.token,
        state_max_bytes=context.service.state_max_bytes,
        rules=context.shared[COMPARED_WITH_REVIEW],
        slicer=context.shared[SLICER],
    )


def _provides(config: ReviewConfig) -> list[Provision]:
    """Whether review is on (the shadow detector keeps answers' text only then)."""
    return [REVIEW_ENABLED.provide(config.enabled)]


def _fields(config: ReviewConfig, guardrails: GuardrailsConfig) -> tuple[str, ...]:
    """A reviewer reads the query and the answer."""
    return ("query", "answer") if config.enabled else ()


def _late_metrics(registry: SidecarRegistry) -> None:
    """The verdict counter, declared when the review page starts."""
    from detectors.review.web import verdicts_counter

    verdicts_counter(registry)


COMPONENT = DetectorComponent(
    name="review",
    config_model=ReviewConfig,
    description="human review queue: sampled answers, the reviewer's page, judge agreement",
    build=_build,
    fields=_fields,
    rules=alerting.rules,
    rows=alerting.rows,
    order=70,
    late_metrics=_late_metrics,
    provides=_provides,
)
