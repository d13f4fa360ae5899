"""Metric names of the drift detector that its rules and panels read: the one spelling
its metrics, its rules and its panels share."""

from __future__ import annotations

P_VALUE = "rag_drift_p_value"  # gauges, label signal; absent until the first test
MMD_STATISTIC = "rag_drift_mmd_statistic"
DETECTED = "rag_drift_detected"
LAST_TEST = "rag_drift_last_test_timestamp_seconds"
REPRESENTATION_CHANGES = "rag_drift_representation_changes_total"  # counter, label signal
REPRESENTATION_INFO = "rag_drift_representation_info"  # 1 per current representation
REPRESENTATION_SHARE = "rag_drift_representation_share"  # of the last window_size vectors
REFERENCE_FILL = "rag_drift_reference_fill_ratio"  # per representation, 1 when filled
TESTS_TOTAL = "rag_drift_tests_total"
VECTORS_TOTAL = "rag_drift_vectors_total"
REJECTED_VECTORS_TOTAL = "rag_drift_rejected_vectors_total"
REFERENCE_VECTORS = "rag_drift_reference_vectors"
REPRESENTATIONS_EVICTED_TOTAL = "rag_drift_representations_evicted_total"
