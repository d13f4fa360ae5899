"""The review loop's rules and dashboard row: items sampled per stratum (a recording rule)
and skipped; judge agreement is for ``rag-monitor report review``. No alert: a queue that
nobody reads is a process problem, not a page."""

from __future__ import annotations

from pathlib import Path

from detectors.review.config import ReviewConfig
from detectors.review.names import (
    SAMPLED_TOTAL,
    SKIPPED_TOTAL,
    sampled_rate,
)
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.rulekit.fragments import Panel, Row, RuleFragment
from monitor.contract.rulekit.promql import JOB, panel_rate, sum_rate

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]


def rules(config: ReviewConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    """Items queued per second by stratum over the guardrails window."""
    window = guardrails.window
    recording = [
        {"record": sampled_rate(window), "expr": sum_rate(SAMPLED_TOTAL, window, by="job, stratum")}
    ]
    return RuleFragment(recording=recording, promtool_tests=PROMTOOL_TESTS)


def rows(config: ReviewConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """Items queued and skipped by stratum."""
    panels = [
        Panel(
            "Review items sampled by stratum",
            [(f"sum by (stratum) ({sampled_rate(guardrails.window)}{{{JOB}}})", "{{stratum}}")],
            unit="ops",
        ),
        Panel(
            "Review items skipped",
            [(panel_rate(SKIPPED_TOTAL, by="stratum, reason"), "{{stratum}} {{reason}}")],
            unit="ops",
        ),
    ]
    return [Row("Human review", panels)]
