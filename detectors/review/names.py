"""Metric names of the review loop: the one spelling its metrics and panels share."""

from __future__ import annotations

# The sampled and verdict counters and the queue gauge are spelled by the core
# (monitor/contract/names.py): the guardrail report reads them too.
from monitor.contract import names as core

QUEUE_ITEMS = core.QUEUE_ITEMS
SAMPLED_TOTAL = core.SAMPLED_TOTAL
VERDICTS_TOTAL = core.VERDICTS_TOTAL

SKIPPED_TOTAL = "rag_review_skipped_total"  # labels stratum, reason
RETENTION_DELETED_TOTAL = "rag_review_retention_deleted_total"
KAFKA_RECORDS_TOTAL = "rag_review_kafka_records_total"  # labels direction, outcome


def sampled_rate(window: str) -> str:
    """Review items queued per second per job and stratum over ``window``."""
    return f"rag:review_sampled:rate{window}"
