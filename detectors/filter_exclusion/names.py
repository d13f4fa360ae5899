"""Metric and recording-rule names of the filter-exclusion detector: the one spelling
its metrics, its rules and its panels share."""

from __future__ import annotations

# The detector's eligible queries, false exclusions and recall@k are spelled by the core
# (monitor/contract/names.py): the drift detector's report reads them too.
ENTITLEMENT_VIOLATIONS_TOTAL = "rag_entitlement_violations_total"
ELIGIBLE_GOLD_DOCS_TOTAL = "rag_filter_eligible_gold_docs_total"
EXCLUDED_GOLD_DOCS_TOTAL = "rag_filter_excluded_gold_docs_total"
NO_ELIGIBLE_GOLD_TOTAL = "rag_filter_no_eligible_gold_total"
UNMATCHED_LABELS_TOTAL = "rag_filter_unmatched_labels_total"
UNMATCHED_PROBE_TRACES_TOTAL = "rag_filter_unmatched_probe_traces_total"
DUPLICATE_LABELS_TOTAL = "rag_filter_duplicate_labels_total"
JOIN_PENDING = "rag_filter_join_pending"


def false_exclusion_ratio(window: str) -> str:
    """The recorded share of labelled queries that lost a gold document to a filter."""
    return f"rag:filter_false_exclusions:ratio_rate{window}"


def eligible_count(window: str) -> str:
    """The recorded number of labelled queries per job: the evidence the bound rests on."""
    return f"rag:filter_eligible_queries:increase{window}"


def false_exclusion_lower_bound(window: str) -> str:
    """The recorded one-sided Wilson lower bound of ``false_exclusion_ratio(window)``."""
    return f"rag:filter_false_exclusions:lower_bound{window}"
