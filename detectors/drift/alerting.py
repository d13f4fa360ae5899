"""The drift detector's rules and panels: the MMD test's verdict, p-value and statistic
per signal; the significance level is ``detectors.drift.p_value``.

The result gauges are absent until the first test, and the p-value stays absent
in online mode: the alert needs only the verdict, and quotes the p-value when
there is one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.drift.names import DETECTED, LAST_TEST, MMD_STATISTIC, P_VALUE
from monitor.components import Panel, Row, RuleFragment
from monitor.config import GuardrailsConfig
from monitor.promql import JOB, alert

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]


def rules(config: Any, guardrails: GuardrailsConfig) -> RuleFragment:
    """The alert on a drift verdict. Its value is the p-value of the flagged test, or 1 in
    online mode (no p-value); a flagged p-value is below 1, so the description quotes it then."""
    drifted = alert(
        guardrails,
        "RagQueryDriftDetected",
        f"{P_VALUE}\nand on (job, instance, signal)\n{DETECTED} == 1\nor\n{DETECTED} == 1",
        severity="ticket",
        summary="Query embeddings drifted from the reference window ({{ $labels.job }})",
        description="The MMD two-sample test on {{ $labels.signal }} rejects 'same "
        "distribution'{{ if lt $value 1.0 }} (p = "
        '{{ $value | printf "%.3g" }}){{ end }} on {{ $labels.instance }}.',
    )
    return RuleFragment(alerting=[drifted], promtool_tests=PROMTOOL_TESTS)


def rows(config: Any, guardrails: GuardrailsConfig) -> list[Row]:
    """p-value against the significance level, the MMD statistic, the verdict, and the age of
    the last test (empty panels before the first test: no result yet, not a result of 0)."""
    panels = [
        Panel(
            "p-value",
            [
                (f"min by (signal) ({P_VALUE}{{{JOB}}})", "{{signal}}"),
                (f"vector({config.p_value})", "significance"),
            ],
            width=6,
        ),
        Panel(
            "MMD statistic",
            [(f"max by (signal) ({MMD_STATISTIC}{{{JOB}}})", "{{signal}}")],
            width=6,
        ),
        Panel(
            "Drift detected",
            [(f"max by (signal) ({DETECTED}{{{JOB}}})", "{{signal}}")],
            kind="stat",
            width=6,
        ),
        Panel(
            "Since the last test",
            [(f"time() - max by (signal) ({LAST_TEST}{{{JOB}}})", "{{signal}}")],
            kind="stat",
            unit="s",
            width=6,
        ),
    ]
    return [Row("Query drift (MMD)", panels)]
