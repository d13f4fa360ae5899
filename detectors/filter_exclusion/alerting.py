"""The filter-exclusion detector's rules and panels: relevance filters that drop gold
documents (``guardrails.false_exclusion_max`` over ``sample_window``), recall@k, and
the entitlement alarm (a document of another tenant reached a caller)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.filter_exclusion.names import (
    ELIGIBLE_QUERIES_TOTAL,
    ENTITLEMENT_VIOLATIONS_TOTAL,
    FALSE_EXCLUSIONS_TOTAL,
    RETRIEVAL_RECALL,
    false_exclusion_ratio,
)
from monitor.components import Panel, Row, RuleFragment
from monitor.config import GuardrailsConfig
from monitor.promql import (
    alert,
    enough,
    panel_increase,
    panel_rate,
    panel_ratio,
    percent,
    ratio,
    sum_increase,
    sum_rate,
)

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]


def rules(config: Any, guardrails: GuardrailsConfig) -> RuleFragment:
    """The false-exclusion ratio per job with its alert, and the entitlement page."""
    window, maximum = guardrails.sample_window, guardrails.false_exclusion_max
    recorded = false_exclusion_ratio(window)
    recording = {
        "record": recorded,
        "expr": ratio(
            sum_rate(FALSE_EXCLUSIONS_TOTAL, window), sum_rate(ELIGIBLE_QUERIES_TOTAL, window)
        ),
    }
    high = alert(
        guardrails,
        "RagFilterFalseExclusionHigh",
        f"{recorded} > {maximum}\n" + enough(guardrails, ELIGIBLE_QUERIES_TOTAL, window),
        severity="ticket",
        summary=f"Relevance filters drop gold documents in more than {percent(maximum)} of "
        "labelled queries ({{ $labels.job }})",
        description=f"Over the last {window}, {{{{ $value | humanizePercentage }}}}"
        " of the queries with known gold documents lost one to a relevance filter (locale, "
        f"recency, category); the guardrail is {percent(maximum)}.",
    )
    violation = alert(
        guardrails,
        "RagEntitlementViolation",
        f"{sum_increase(ENTITLEMENT_VIOLATIONS_TOTAL, guardrails.window)} > 0",
        severity="page",
        summary="A document of another tenant reached a caller ({{ $labels.job }})",
        description='{{ $value | printf "%.0f" }} entitlement violation(s) in the last '
        f"{guardrails.window}: a context supplied to the generator belonged to a tenant other "
        "than the caller's. Treat it as a security incident.",
        for_="0s",
    )
    return RuleFragment(
        recording=[recording], alerting=[high, violation], promtool_tests=PROMTOOL_TESTS
    )


def rows(config: Any, guardrails: GuardrailsConfig) -> list[Row]:
    """False-exclusion ratio against the guardrail, mean recall@k, entitlement violations."""
    eligible = panel_rate(ELIGIBLE_QUERIES_TOTAL)
    recall = panel_ratio(
        panel_rate(f"{RETRIEVAL_RECALL}_sum", by="k"),
        panel_rate(f"{RETRIEVAL_RECALL}_count", by="k"),
    )
    panels = [
        Panel(
            "False-exclusion ratio",
            [
                (
                    panel_ratio(panel_rate(FALSE_EXCLUSIONS_TOTAL), eligible),
                    "false exclusions / eligible queries",
                ),
                (f"vector({guardrails.false_exclusion_max})", "guardrail"),
            ],
            unit="percentunit",
        ),
        Panel("Mean recall@k", [(recall, "recall@{{k}}")], unit="percentunit"),
        Panel(
            "Entitlement violations",
            [(panel_increase(ENTITLEMENT_VIOLATIONS_TOTAL, by="job"), "violations")],
            description="A document of another tenant reached a caller: a security alarm.",
        ),
    ]
    return [Row("Retrieval: relevance filter and entitlement", panels)]
