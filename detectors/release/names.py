"""Metric names of the release detector: the one spelling its metrics and panels share."""

from __future__ import annotations

from monitor.contract.names import RELEASE_FIRST_SEEN

RELEASE_INFO = "rag_release_info"  # gauge = 1, labels service, version, environment
# gauge, labels service, version; the core spells it (every guardrail alert's triage reads it)
RELEASE_FIRST_SEEN_TIMESTAMP_SECONDS = RELEASE_FIRST_SEEN
RELEASE_DROPPED_TOTAL = "rag_release_dropped_total"  # counter, label reason
