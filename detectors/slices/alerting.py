"""The slices detector's recording rule and dashboard row. No alerts of its own: the
regeneration rate by intent is recorded so that a person (or a later per-intent band) can
see which intent moves the global rate; the coverage matrix is read on the dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.slices.names import (
    COVERAGE_REQUESTS_TOTAL,
    SLICE_EVICTED_TRACES_TOTAL,
    SLICE_REGENERATIONS_TOTAL,
    SLICE_REQUESTS_TOTAL,
    SLICE_UNMATCHED_FEEDBACK_TOTAL,
    regeneration_ratio_by_intent,
)
from monitor.guardrails import GuardrailsConfig
from monitor.rulekit.fragments import Panel, Row, RuleFragment
from monitor.rulekit.promql import JOB, RATE, panel_rate, sum_increase, sum_rate
from monitor.variants import PRODUCTION

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]
# Guardrail figures are production's: shadow and canary traffic is compared, not judged.
SERVED = f'{{variant="{PRODUCTION}"}}'
BY_INTENT = "job, intent"


def rules(config: Any, guardrails: GuardrailsConfig) -> RuleFragment:
    """Production regenerations per request by intent, for windows with enough requests."""
    window = guardrails.window
    regenerations = sum_rate(f"{SLICE_REGENERATIONS_TOTAL}{SERVED}", window, BY_INTENT)
    requests = sum_rate(f"{SLICE_REQUESTS_TOTAL}{SERVED}", window, BY_INTENT)
    enough_requests = sum_increase(f"{SLICE_REQUESTS_TOTAL}{SERVED}", window, BY_INTENT)
    recording = [
        {
            # An intent without any regeneration records 0, not nothing (as the global ratio).
            "record": regeneration_ratio_by_intent(window),
            "expr": f"(\n  {regenerations}\n  or {requests} * 0\n)\n/\n({requests} > 0)\n"
            f"and on ({BY_INTENT})\n{enough_requests} >= {guardrails.min_events}",
        }
    ]
    return RuleFragment(recording=recording, promtool_tests=PROMTOOL_TESTS)


def rows(config: Any, guardrails: GuardrailsConfig) -> list[Row]:
    """Regeneration rate and requests by intent, the coverage matrix, and what the slices
    could not attribute."""
    ratio = regeneration_ratio_by_intent(guardrails.window)
    coverage = (
        f"sum by (intent, document_type) "
        f"(increase({COVERAGE_REQUESTS_TOTAL}{{{JOB}}}[{guardrails.baseline}]))"
    )
    panels = [
        Panel(
            "Regeneration rate by intent (production)",
            [(f"sum by (intent) ({ratio}{{{JOB}}})", "{{intent}}")],
            unit="percentunit",
            width=8,
        ),
        Panel(
            "Requests by intent and variant",
            [(panel_rate(SLICE_REQUESTS_TOTAL, by="intent, variant"), "{{intent}} {{variant}}")],
            unit="reqps",
            width=8,
        ),
        Panel(
            "Slices not attributed",
            [
                (
                    f"sum (increase({SLICE_UNMATCHED_FEEDBACK_TOTAL}{{{JOB}}}[{RATE}]))",
                    "regenerate events without their trace",
                ),
                (
                    f"sum (increase({SLICE_EVICTED_TRACES_TOTAL}{{{JOB}}}[{RATE}]))",
                    "traces evicted before feedback_ttl_s",
                ),
            ],
            unit="none",
            width=8,
        ),
        Panel(
            f"Coverage: production requests by intent x document type (last {guardrails.baseline})",
            [(coverage, "{{intent}} x {{document_type}}")],
            unit="none",
            kind="bargauge",
            description="One bar per cell of the configured intents x document types; a cell "
            "at 0 is a query intent the corpus never answered with that document type.",
            width=24,
        ),
    ]
    return [Row("Slices (intent, document type)", panels)]
