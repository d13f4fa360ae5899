"""The faithfulness detector's rules and panels: the share of sampled answers that HHEM
scores at or above the threshold, against ``guardrails.faithfulness_min`` over the
longer ``guardrails.sample_window`` (sampled signals see few events per minute)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.faithfulness.names import (
    BELOW_THRESHOLD_TOTAL,
    EVALUATIONS_TOTAL,
    FAITHFULNESS_SCORE,
    SCORED,
    pass_ratio,
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
    sum_rate,
)

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]


def rules(config: Any, guardrails: GuardrailsConfig) -> RuleFragment:
    """The pass share per job, and the page when it falls below the minimum."""
    window, minimum = guardrails.sample_window, guardrails.faithfulness_min
    recorded = pass_ratio(window)
    failing = ratio(sum_rate(BELOW_THRESHOLD_TOTAL, window), sum_rate(SCORED, window))
    low = alert(
        guardrails,
        "RagFaithfulnessLow",
        f"{recorded} < {minimum}\n" + enough(guardrails, SCORED, window),
        severity="page",
        summary=f"Fewer than {percent(minimum)} of sampled answers are faithful "
        "({{ $labels.job }})",
        description=f"Over the last {window}, {{{{ $value | humanizePercentage }}}}"
        " of the answers scored by HHEM reached the faithfulness threshold; the guardrail is "
        f"{percent(minimum)}. Answers are drifting away from the retrieved evidence.",
    )
    return RuleFragment(
        recording=[{"record": recorded, "expr": f"1 - (\n{failing}\n)"}],
        alerting=[low],
        promtool_tests=PROMTOOL_TESTS,
    )


def rows(config: Any, guardrails: GuardrailsConfig) -> list[Row]:
    """The pass share against the guardrail, the score heatmap, evaluations by outcome."""
    scored = panel_rate(EVALUATIONS_TOTAL, 'outcome="scored"')
    panels = [
        Panel(
            "Pass share",
            [
                ("1 - " + panel_ratio(panel_rate(BELOW_THRESHOLD_TOTAL), scored), "pass share"),
                (f"vector({guardrails.faithfulness_min})", "guardrail"),
            ],
            unit="percentunit",
            description="Share of scored answers at or above the HHEM threshold.",
        ),
        Panel(
            "Score distribution",
            [(panel_increase(f"{FAITHFULNESS_SCORE}_bucket", by="le"), "{{le}}")],
            kind="heatmap",
        ),
        Panel(
            "Evaluations by outcome",
            [(panel_rate(EVALUATIONS_TOTAL, by="outcome"), "{{outcome}}")],
            unit="ops",
        ),
    ]
    return [Row("Faithfulness (HHEM, sampled)", panels)]
