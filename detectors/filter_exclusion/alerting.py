"""The filter-exclusion detector's rules and panels: relevance filters that drop gold
documents, judged on evidence (the ticket fires when even the lower Wilson bound of the
false-exclusion ratio is above ``guardrails.false_exclusion_max``, on each of
``guardrails.sample_windows``), recall@k, and the entitlement alarm (a document of
another tenant reached a caller)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.filter_exclusion.config import FilterExclusionConfig
from detectors.filter_exclusion.names import (
    ENTITLEMENT_VIOLATIONS_TOTAL,
    eligible_count,
    false_exclusion_lower_bound,
    false_exclusion_ratio,
)
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import ELIGIBLE_QUERIES_TOTAL, FALSE_EXCLUSIONS_TOTAL, RETRIEVAL_RECALL
from monitor.contract.rulekit.evidence import (
    BoundedShare,
    confidence,
    derivation,
    hold_for,
    window_z,
)
from monitor.contract.rulekit.fragments import Panel, Row, RuleFragment
from monitor.contract.rulekit.promql import (
    alert,
    panel_increase,
    panel_rate,
    panel_ratio,
    panel_recorded,
    percent,
    production,
    recorded_value,
    sum_increase,
)

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]
FALSE_EXCLUSIONS = BoundedShare(
    hits=production(FALSE_EXCLUSIONS_TOTAL),
    events=production(ELIGIBLE_QUERIES_TOTAL),
    share=false_exclusion_ratio,
    count=eligible_count,
    bound=false_exclusion_lower_bound,
    side="lower",
)


def high_exclusion_alerts(
    guardrails: GuardrailsConfig, windows: list[tuple[str, float]]
) -> list[dict[str, Any]]:
    """RagFilterFalseExclusionHigh per window: the lower bound above the maximum."""
    maximum = guardrails.false_exclusion_max
    alerts = []
    for window, z in windows:
        labelled = recorded_value(eligible_count(window), ("job",), 'printf "%.0f"')
        point = recorded_value(false_exclusion_ratio(window), ("job",), "humanizePercentage")
        alerts.append(
            alert(
                guardrails,
                "RagFilterFalseExclusionHigh",
                f"{false_exclusion_lower_bound(window)} > {maximum}",
                severity="ticket",
                summary="Relevance filters drop gold documents in more than "
                f"{percent(maximum)} of labelled queries ({{{{ $labels.job }}}})",
                description=f"Over the last {window}, {point} of {labelled} queries with known "
                f"gold documents ({false_exclusion_ratio(window)}, {eligible_count(window)}) "
                "lost one to a relevance filter (locale, recency, category); even the "
                f"{confidence(z)} lower bound of that ratio, {{{{ $value | humanizePercentage }}}}"
                f" ({false_exclusion_lower_bound(window)}), is above the guardrail of "
                f"{percent(maximum)}.",
                for_=hold_for(guardrails),
                labels={"window": window},
            )
        )
    return alerts


def rules(config: FilterExclusionConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    """The false-exclusion ratio, its count and bound per window with its ticket, and the
    entitlement page."""
    windows = window_z(guardrails, "ticket", guardrails.sample_windows)
    recording = [rule for window, z in windows for rule in FALSE_EXCLUSIONS.recording(window, z)]
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
        recording=recording,
        alerting=[*high_exclusion_alerts(guardrails, windows), violation],
        promtool_tests=PROMTOOL_TESTS,
        derivations=derivation(
            "RagFilterFalseExclusionHigh", windows, "lower bound of the false-exclusion ratio"
        ),
    )


def rows(config: FilterExclusionConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """The false-exclusion ratio beside its lower bound and the guardrail, the labelled
    queries they rest on, mean recall@k, entitlement violations."""
    windows = guardrails.sample_windows
    ratios = [
        query
        for window in windows
        for query in (
            (panel_recorded(false_exclusion_ratio(window)), f"ratio {window}"),
            (panel_recorded(false_exclusion_lower_bound(window)), f"lower bound {window}"),
        )
    ]
    recall = panel_ratio(
        panel_rate(f"{RETRIEVAL_RECALL}_sum", by="k"),
        panel_rate(f"{RETRIEVAL_RECALL}_count", by="k"),
    )
    # The raw ratio of the dashboard's $variant beside the production recordings.
    chosen = panel_ratio(
        panel_rate(FALSE_EXCLUSIONS_TOTAL, guardrail=True),
        panel_rate(ELIGIBLE_QUERIES_TOTAL, guardrail=True),
    )
    panels = [
        Panel(
            "False-exclusion ratio and its lower bound",
            [
                *ratios,
                (chosen, "ratio ($variant)"),
                (f"vector({guardrails.false_exclusion_max})", "guardrail"),
            ],
            unit="percentunit",
            description="The ticket fires when the lower bound is above the guardrail.",
        ),
        Panel(
            "Labelled queries per window (the evidence)",
            [(panel_recorded(eligible_count(w)), f"labelled in {w}") for w in windows],
        ),
        Panel("Mean recall@k", [(recall, "recall@{{k}}")], unit="percentunit"),
        Panel(
            "Entitlement violations",
            [(panel_increase(ENTITLEMENT_VIOLATIONS_TOTAL, by="job"), "violations")],
            description="A document of another tenant reached a caller: a security alarm.",
        ),
    ]
    return [Row("Retrieval: relevance filter and entitlement", panels)]
