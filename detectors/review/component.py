"""The review detector's registration (entry point ``rag_monitor.detectors: review``)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from detectors.review import alerting
from detectors.review.commands import COMMANDS
from detectors.review.config import ReviewConfig
from monitor.components import BuildContext, DetectorComponent
from monitor.detector import Detector


def _build(config: ReviewConfig, context: BuildContext) -> Detector:
    from detectors.review.detector import ReviewDetector

    # The Kafka connection and the bearer token are shared settings, handed over by the core;
    # the pass rules of the evaluations compared with review come from their own section.
    evaluations = getattr(getattr(context.root.detectors, "evaluations", None), "evaluations", {})
    rules = {name: rule.passes for name, rule in evaluations.items() if rule.compare_with_review}
    return ReviewDetector(
        config,
        context.registry,
        context.state_dir,
        kafka=context.kafka,
        emit=context.emit,
        token=context.token,
        state_max_bytes=context.root.service.state_max_bytes,
        rules=rules,
    )


def _fields(config: ReviewConfig, guardrails: Any) -> tuple[str, ...]:
    """A reviewer reads the query and the answer."""
    return ("query", "answer") if config.enabled else ()


def _late_metrics(registry: CollectorRegistry) -> None:
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
    commands=COMMANDS,
    late_metrics=_late_metrics,
)
