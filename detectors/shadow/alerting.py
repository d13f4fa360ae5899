"""The shadow comparison's dashboard row. No alerts: a shadow serves no user, so its deltas
are evidence for a release decision (``rag-monitor report shadow``), not a page."""

from __future__ import annotations

from detectors.shadow.config import ShadowConfig
from detectors.shadow.names import (
    ANSWER_CHANGED_TOTAL,
    COST_DELTA_USD,
    EXCLUSION_DISAGREEMENTS_TOTAL,
    EXCLUSION_SCORED_TOTAL,
    FAITHFULNESS_DELTA,
    HALVES_TOTAL,
    LATENCY_DELTA_SECONDS,
    PAIRS_TOTAL,
    RETRIEVAL_OVERLAP,
    UNSCORABLE_TOTAL,
)
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.rulekit.fragments import Panel, Row
from monitor.contract.rulekit.promql import panel_increase, panel_quantile, panel_rate, panel_ratio

# A histogram with negative buckets has no _sum (client_python: a sum that can fall breaks
# Prometheus's reset detection), so the signed deltas show as medians; the report has means.
SIGNED = "from the histogram buckets; rag-monitor report shadow gives the mean with its interval"


def _median(histogram: str, by: str) -> str:
    return panel_quantile(0.5, histogram, by=by)


def _mean(histogram: str, by: str) -> str:
    """The mean of a histogram's observations over the panel's rate interval."""
    return panel_ratio(
        panel_rate(f"{histogram}_sum", by=by), panel_rate(f"{histogram}_count", by=by)
    )


def rows(config: ShadowConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """Mean paired deltas per shadow variant, and what did not pair."""
    share_of_pairs = panel_ratio(
        panel_rate(ANSWER_CHANGED_TOTAL, by="variant"), panel_rate(PAIRS_TOTAL, by="variant")
    )
    disagreement = panel_ratio(
        panel_rate(EXCLUSION_DISAGREEMENTS_TOTAL, by="variant"),
        panel_rate(EXCLUSION_SCORED_TOTAL, by="variant"),
    )
    panels = [
        Panel(
            "Latency delta, shadow - production (median pair)",
            [(_median(LATENCY_DELTA_SECONDS, "variant, stage"), "{{variant}} {{stage}}")],
            unit="s",
            description=SIGNED,
        ),
        Panel(
            "Cost delta per request (median pair)",
            [(_median(COST_DELTA_USD, "variant"), "{{variant}}")],
            unit="currencyUSD",
            description=SIGNED,
        ),
        Panel(
            "Faithfulness score delta (median scored pair)",
            [(_median(FAITHFULNESS_DELTA, "variant"), "{{variant}}")],
            unit="none",
            description=SIGNED,
        ),
        Panel(
            "Retrieved-set overlap (Jaccard, mean per pair)",
            [(_mean(RETRIEVAL_OVERLAP, "variant"), "{{variant}}")],
            unit="percentunit",
        ),
        Panel(
            "Answers changed (share of pairs)",
            [(share_of_pairs, "{{variant}}")],
            unit="percentunit",
        ),
        Panel(
            "False-exclusion disagreement (share of pairs with both decisions)",
            [(disagreement, "{{variant}}")],
            unit="percentunit",
            description="pairs where one twin lost every eligible gold document and the other "
            "did not; rag_shadow_false_exclusion_disagreements_total{direction} says which",
        ),
        Panel(
            "Pair halves by outcome",
            [(panel_increase(HALVES_TOTAL, "variant, outcome"), "{{variant}} {{outcome}}")],
            unit="none",
            description="timed_out, evicted, stopped and duplicate halves are in no delta",
        ),
        Panel(
            "Unscorable pairs by metric",
            [(panel_increase(UNSCORABLE_TOTAL, "variant, metric"), "{{variant}} {{metric}}")],
            unit="none",
            description="joined pairs without a delta for the metric: a twin lacked the value",
        ),
    ]
    return [Row("Shadow comparison", panels)]
