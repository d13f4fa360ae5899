"""Metric and recording-rule names of the faithfulness detector: the one spelling its
metrics, its rules and its panels share."""

from __future__ import annotations

FAITHFULNESS_SCORE = "rag_faithfulness_score"  # histogram of HHEM scores, label variant
EVALUATIONS_TOTAL = "rag_faithfulness_evaluations_total"  # labels outcome (scored, ...), variant
BELOW_THRESHOLD_TOTAL = "rag_faithfulness_below_threshold_total"  # label variant
SCORED = f'{EVALUATIONS_TOTAL}{{outcome="scored"}}'


def pass_ratio(window: str) -> str:
    """The recorded share of scored answers at or above the threshold per job."""
    return f"rag:faithfulness_pass:ratio_rate{window}"


def scored_count(window: str) -> str:
    """The recorded number of scored answers per job: the evidence the bound rests on."""
    return f"rag:faithfulness_scored:increase{window}"


def pass_upper_bound(window: str) -> str:
    """The recorded one-sided Wilson upper bound of ``pass_ratio(window)``."""
    return f"rag:faithfulness_pass:upper_bound{window}"
