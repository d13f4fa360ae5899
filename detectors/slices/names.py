"""Metric and recording-rule names of the slices detector: the one spelling its metrics,
its rules and its panels share."""

from __future__ import annotations

# The coverage counter is spelled by the core (monitor/contract/names.py): the guardrail report
# reads it too.
from monitor.contract import names as core

COVERAGE_REQUESTS_TOTAL = core.COVERAGE_REQUESTS_TOTAL

SLICE_REQUESTS_TOTAL = "rag_slice_requests_total"  # labels intent, variant
SLICE_REGENERATIONS_TOTAL = "rag_slice_regenerations_total"  # labels intent, variant
SLICE_UNMATCHED_FEEDBACK_TOTAL = "rag_slice_unmatched_feedback_total"
SLICE_EVICTED_TRACES_TOTAL = "rag_slice_evicted_traces_total"

_REGENERATION_BY_INTENT = "rag:slice_regenerations_per_request"


def regeneration_ratio_by_intent(window: str) -> str:
    """The recorded production regenerations per request per job and intent over ``window``."""
    return f"{_REGENERATION_BY_INTENT}:ratio_rate{window}"
