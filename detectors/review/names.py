"""Metric names of the review loop: the one spelling its metrics and panels share."""

from __future__ import annotations

SAMPLED_TOTAL = "rag_review_sampled_total"  # label stratum
SKIPPED_TOTAL = "rag_review_skipped_total"  # labels stratum, reason
QUEUE_ITEMS = "rag_review_queue_items"
RETENTION_DELETED_TOTAL = "rag_review_retention_deleted_total"
KAFKA_RECORDS_TOTAL = "rag_review_kafka_records_total"  # labels direction, outcome
VERDICTS_TOTAL = "rag_review_verdicts_total"


def sampled_rate(window: str) -> str:
    """Review items queued per second per job and stratum over ``window``."""
    return f"rag:review_sampled:rate{window}"
