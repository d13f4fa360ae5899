"""Metric and recording-rule names of the filter-exclusion detector: the one spelling
its metrics, its rules and its panels share."""

from __future__ import annotations

ELIGIBLE_QUERIES_TOTAL = "rag_filter_eligible_queries_total"
FALSE_EXCLUSIONS_TOTAL = "rag_filter_false_exclusions_total"
ENTITLEMENT_VIOLATIONS_TOTAL = "rag_entitlement_violations_total"
RETRIEVAL_RECALL = "rag_retrieval_recall"  # histogram, label k


def false_exclusion_ratio(sample_window: str) -> str:
    """The recorded share of labelled queries that lost a gold document to a filter."""
    return f"rag:filter_false_exclusions:ratio_rate{sample_window}"
