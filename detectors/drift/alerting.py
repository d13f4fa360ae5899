"""The drift detector's rules and panels: the MMD test's verdict, p-value and statistic
per signal; the significance level is ``detectors.drift.p_value``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.drift.names import DETECTED, MMD_STATISTIC, P_VALUE
from monitor.components import Panel, Row, RuleFragment
from monitor.config import GuardrailsConfig
from monitor.promql import JOB, alert

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]


def rules(config: Any, guardrails: GuardrailsConfig) -> RuleFragment:
    """The alert on a drift verdict; its value is the p-value, so the description quotes it."""
    drifted = alert(
        guardrails,
        "RagQueryDriftDetected",
        f"{P_VALUE}\nand on (job, instance, signal)\n{DETECTED} == 1",
        severity="ticket",
        summary="Query embeddings drifted from the reference window ({{ $labels.job }})",
        description="The MMD two-sample test on {{ $labels.signal }} rejects 'same "
        'distribution\' (p = {{ $value | printf "%.3g" }}) on {{ $labels.instance }}.',
    )
    return RuleFragment(alerting=[drifted], promtool_tests=PROMTOOL_TESTS)


def rows(config: Any, guardrails: GuardrailsConfig) -> list[Row]:
    """p-value against the significance level, the MMD statistic, the verdict."""
    panels = [
        Panel(
            "p-value",
            [
                (f"min by (signal) ({P_VALUE}{{{JOB}}})", "{{signal}}"),
                (f"vector({config.p_value})", "significance"),
            ],
        ),
        Panel("MMD statistic", [(f"max by (signal) ({MMD_STATISTIC}{{{JOB}}})", "{{signal}}")]),
        Panel(
            "Drift detected",
            [(f"max by (signal) ({DETECTED}{{{JOB}}})", "{{signal}}")],
            kind="stat",
        ),
    ]
    return [Row("Query drift (MMD)", panels)]
