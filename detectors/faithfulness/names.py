"""Metric and recording-rule names of the faithfulness detector: the one spelling its
metrics, its rules and its panels share."""

from __future__ import annotations

FAITHFULNESS_SCORE = "rag_faithfulness_score"  # histogram of HHEM scores
EVALUATIONS_TOTAL = "rag_faithfulness_evaluations_total"  # label outcome (scored, error, ...)
BELOW_THRESHOLD_TOTAL = "rag_faithfulness_below_threshold_total"
SCORED = f'{EVALUATIONS_TOTAL}{{outcome="scored"}}'


def pass_ratio(sample_window: str) -> str:
    """The recorded share of scored answers at or above the threshold per job."""
    return f"rag:faithfulness_pass:ratio_rate{sample_window}"
