"""Metric names the collectors declare themselves, spelled once. Counters are spelled with
``_total``, as PromQL reads them. The Kafka lag gauge is declared by the Kafka collector
but named in ``monitor/contract/names.py``: the dashboard's health row reads it."""

from __future__ import annotations

# OTLP log records received, by collector and kind (collectors/otlp/logs.py).
LOG_RECORDS_TOTAL = "rag_monitor_log_records_total"
# Offset commits the broker did not take, by when (collectors/kafka/commits.py).
KAFKA_COMMIT_FAILURES_TOTAL = "rag_monitor_kafka_commit_failures_total"
# Records read but not committed when their partition left the replica, by reason.
KAFKA_HANDED_BACK_RECORDS_TOTAL = "rag_monitor_kafka_handed_back_records_total"
