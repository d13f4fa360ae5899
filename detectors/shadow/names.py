"""Metric names of the shadow comparison: the one spelling its metrics and panels share."""

from __future__ import annotations

# Histograms of shadow minus production, per joined pair; label variant (the shadow's).
LATENCY_DELTA_SECONDS = "rag_shadow_latency_delta_seconds"  # + label stage
COST_DELTA_USD = "rag_shadow_cost_delta_usd"
FAITHFULNESS_DELTA = "rag_shadow_faithfulness_delta"
RETRIEVAL_OVERLAP = "rag_shadow_retrieval_overlap"  # Jaccard of the retrieved sets
# Counters per joined pair.
PAIRS_TOTAL = "rag_shadow_pairs_total"  # label variant
ANSWER_CHANGED_TOTAL = "rag_shadow_answer_changed_total"  # label variant
EXCLUSION_SCORED_TOTAL = "rag_shadow_false_exclusion_scored_total"  # label variant
# label variant, direction: shadow_only (the shadow lost the gold, production did not),
# production_only
EXCLUSION_DISAGREEMENTS_TOTAL = "rag_shadow_false_exclusion_disagreements_total"
UNSCORABLE_TOTAL = "rag_shadow_unscorable_total"  # labels variant, metric
# Halves by outcome: joined, timed_out, evicted, stopped, duplicate, dropped; label variant.
HALVES_TOTAL = "rag_shadow_halves_total"
LATE_SIGNALS_TOTAL = "rag_shadow_late_signals_total"  # label kind
PENDING = "rag_shadow_pending"  # gauge, label kind: halves, pairs
KAFKA_RECORDS_TOTAL = "rag_shadow_kafka_records_total"  # labels topic, direction, outcome
HALVES_PARTITIONS = "rag_shadow_halves_partitions"  # gauge: halves_topic partitions owned
