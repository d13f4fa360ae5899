"""Metric and recording-rule names of the filter-exclusion detector: the one spelling
its metrics, its rules and its panels share."""

from __future__ import annotations

ELIGIBLE_QUERIES_TOTAL = "rag_filter_eligible_queries_total"  # label variant
FALSE_EXCLUSIONS_TOTAL = "rag_filter_false_exclusions_total"  # label variant
ENTITLEMENT_VIOLATIONS_TOTAL = "rag_entitlement_violations_total"
RETRIEVAL_RECALL = "rag_retrieval_recall"  # histogram, label k


def false_exclusion_ratio(window: str) -> str:
    """The recorded share of labelled queries that lost a gold document to a filter."""
    return f"rag:filter_false_exclusions:ratio_rate{window}"


def eligible_count(window: str) -> str:
    """The recorded number of labelled queries per job: the evidence the bound rests on."""
    return f"rag:filter_eligible_queries:increase{window}"


def false_exclusion_lower_bound(window: str) -> str:
    """The recorded one-sided Wilson lower bound of ``false_exclusion_ratio(window)``."""
    return f"rag:filter_false_exclusions:lower_bound{window}"
