"""The faithfulness detector's rules and panels: the share of sampled answers that HHEM
scores at or above the threshold, against ``guardrails.faithfulness_min``, judged on
evidence: the page fires when even the upper Wilson bound of the share (its z from the
page budget, ``monitor.rulekit.evidence``) is below the guardrail, on each of
``guardrails.sample_windows`` (a short window for a large drop, a long one for a small)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.faithfulness.names import (
    BELOW_THRESHOLD_TOTAL,
    EVALUATIONS_TOTAL,
    FAITHFULNESS_SCORE,
    SCORED,
    pass_ratio,
    pass_upper_bound,
    scored_count,
)
from monitor.config import GuardrailsConfig
from monitor.rulekit.evidence import BoundedShare, confidence, derivation, hold_for, window_z
from monitor.rulekit.fragments import Panel, Row, RuleFragment
from monitor.rulekit.promql import (
    alert,
    panel_increase,
    panel_rate,
    panel_ratio,
    panel_recorded,
    percent,
    production,
    recorded_value,
)

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]
PASS_SHARE = BoundedShare(
    hits=production(BELOW_THRESHOLD_TOTAL),
    events=production(SCORED),
    share=pass_ratio,
    count=scored_count,
    bound=pass_upper_bound,
    side="upper",
    complement=True,
)


def rules(config: Any, guardrails: GuardrailsConfig) -> RuleFragment:
    """Per window: the pass share, the scored count, its upper bound, and the page."""
    minimum = guardrails.faithfulness_min
    windows = window_z(guardrails, "page", guardrails.sample_windows)
    recording, alerting = [], []
    for window, z in windows:
        recording += PASS_SHARE.recording(window, z)
        scored = recorded_value(scored_count(window), ("job",), 'printf "%.0f"')
        point = recorded_value(pass_ratio(window), ("job",), "humanizePercentage")
        alerting.append(
            alert(
                guardrails,
                "RagFaithfulnessLow",
                f"{pass_upper_bound(window)} < {minimum}",
                severity="page",
                summary=f"Fewer than {percent(minimum)} of sampled answers are faithful "
                "({{ $labels.job }})",
                description=f"Over the last {window}, {point} of {scored} answers scored by "
                f"HHEM ({pass_ratio(window)}, {scored_count(window)}) reached the faithfulness "
                f"threshold; even the {confidence(z)} upper bound of that share, "
                f"{{{{ $value | humanizePercentage }}}} ({pass_upper_bound(window)}), is below "
                f"the guardrail of {percent(minimum)}. Answers are drifting away from the "
                "retrieved evidence.",
                for_=hold_for(guardrails),
                labels={"window": window},
            )
        )
    return RuleFragment(
        recording=recording,
        alerting=alerting,
        promtool_tests=PROMTOOL_TESTS,
        derivations=derivation("RagFaithfulnessLow", windows, "upper bound of the pass share"),
    )


def rows(config: Any, guardrails: GuardrailsConfig) -> list[Row]:
    """Per window the pass share beside its upper bound and the guardrail, the scored
    counts they rest on, the score heatmap, evaluations by outcome."""
    minimum = f"vector({guardrails.faithfulness_min})"
    shares = [
        query
        for window in guardrails.sample_windows
        for query in (
            (panel_recorded(pass_ratio(window)), f"pass share {window}"),
            (panel_recorded(pass_upper_bound(window)), f"upper bound {window}"),
        )
    ]
    counts = [
        (panel_recorded(scored_count(window)), f"scored in {window}")
        for window in guardrails.sample_windows
    ]
    # The raw share of the dashboard's $variant beside the production recordings.
    scored = panel_rate(EVALUATIONS_TOTAL, 'outcome="scored"', guardrail=True)
    chosen = "1 - " + panel_ratio(panel_rate(BELOW_THRESHOLD_TOTAL, guardrail=True), scored)
    panels = [
        Panel(
            "Pass share and its upper bound",
            [*shares, (chosen, "pass share ($variant)"), (minimum, "guardrail")],
            unit="percentunit",
            description="Share of scored answers at or above the HHEM threshold, and the upper "
            "bound the page tests: it fires when the bound is below the guardrail.",
        ),
        Panel(
            "Scored answers per window (the evidence)",
            counts,
            description="Answers the bounds rest on (production traffic).",
        ),
        Panel(
            "Score distribution",
            [(panel_increase(f"{FAITHFULNESS_SCORE}_bucket", by="le", guardrail=True), "{{le}}")],
            kind="heatmap",
        ),
        Panel(
            "Evaluations by outcome",
            [(panel_rate(EVALUATIONS_TOTAL, by="outcome", guardrail=True), "{{outcome}}")],
            unit="ops",
        ),
    ]
    return [Row("Faithfulness (HHEM, sampled)", panels)]
