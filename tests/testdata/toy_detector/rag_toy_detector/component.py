"""The toy detector: config, detector, rule, panel and its ``DetectorComponent``."""

from __future__ import annotations

from typing import ClassVar

from prometheus_client import Counter
from pydantic import Field

from monitor.contract.components import BuildContext, DetectorComponent
from monitor.contract.detector import Detector, InlineDetector
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.rulekit.fragments import Panel, Row, RuleFragment
from monitor.contract.section import Section
from monitor.contract.trace import Event

EVENTS_TOTAL = "rag_toy_events_total"


class ToyConfig(Section):
    max_events_per_second: float = Field(
        100.0, gt=0, description="alert when events arrive faster than this"
    )


class ToyDetector(InlineDetector):
    """Counts every event (labels and feedback) the pipeline hands it."""

    name: ClassVar[str] = "toy"

    def __init__(self, counter: Counter) -> None:
        self._events = counter

    def observe_event(self, event: Event) -> None:
        self._events.inc()


def build(config: ToyConfig, context: BuildContext) -> Detector:
    counter = Counter(
        EVENTS_TOTAL.removesuffix("_total"), "Events seen by the toy.", registry=context.registry
    )
    return ToyDetector(counter)


def rules(config: ToyConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    return RuleFragment(
        alerting=[
            {
                "alert": "RagToyEventsTooFast",
                "expr": f"sum by (job) (rate({EVENTS_TOTAL}[{guardrails.window}]))"
                f" > {config.max_events_per_second:g}",
                "labels": {"severity": "ticket"},
                "annotations": {"summary": "The toy sees too many events"},
            }
        ]
    )


def rows(config: ToyConfig, guardrails: GuardrailsConfig) -> list[Row]:
    query = f"sum(rate({EVENTS_TOTAL}[{guardrails.window}]))"
    return [Row("Toy", [Panel("Toy events per second", [(query, "events/s")], unit="ops")])]


COMPONENT = DetectorComponent(
    name="toy",
    config_model=ToyConfig,
    description="the toy detector of the architecture guide",
    build=build,
    rules=rules,
    rows=rows,
    order=1000,
)
