"""Metric and recording-rule names of the evaluations detector: the one spelling its
metrics, its rules and its panels share."""

from __future__ import annotations

# labels evaluation (an allowed name, other or none), outcome (pass, fail, error), variant
RESULTS_TOTAL = "rag_evaluation_results_total"
SCORE = "rag_evaluation_score"  # histogram of finite scores, label evaluation
# Results sent apart from their request whose trace this replica never saw or has
# forgotten (counted under production); and evaluation names folded into ``other``.
UNMATCHED_TOTAL = "rag_evaluation_unmatched_total"
FOLDED_TOTAL = "rag_evaluation_folded_total"
# Results seen again (detectors/evaluations/repeats.py): not counted a second time.
DUPLICATES_TOTAL = "rag_evaluation_duplicates_total"
FAILED = f'{RESULTS_TOTAL}{{outcome="fail"}}'
JUDGED = f'{RESULTS_TOTAL}{{outcome=~"pass|fail"}}'


def pass_ratio(window: str) -> str:
    """The recorded pass share of judged results per job and evaluation."""
    return f"rag:evaluation_pass:ratio_rate{window}"


def judged_count(window: str) -> str:
    """The recorded number of judged (pass or fail) results per job and evaluation."""
    return f"rag:evaluation_judged:increase{window}"


def pass_upper_bound(severity: str, window: str) -> str:
    """The recorded one-sided Wilson upper bound of ``pass_ratio(window)`` at the z of
    ``severity``'s budget."""
    return f"rag:evaluation_pass:upper_bound_{severity}{window}"
