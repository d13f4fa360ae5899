"""Metric names of the drift detector that its rules and panels read: the one spelling
its metrics, its rules and its panels share."""

from __future__ import annotations

# The p-value, MMD statistic and representation gauges are spelled by the core
# (monitor/contract/names.py): the guardrail report reads them too.
from monitor.contract import names as core

MMD_STATISTIC = core.MMD_STATISTIC
P_VALUE = core.P_VALUE
REPRESENTATION_INFO = core.REPRESENTATION_INFO

DETECTED = "rag_drift_detected"
LAST_TEST = "rag_drift_last_test_timestamp_seconds"
REPRESENTATION_CHANGES = "rag_drift_representation_changes_total"  # counter, label signal
REPRESENTATION_SHARE = "rag_drift_representation_share"  # of the last window_size vectors
REFERENCE_FILL = "rag_drift_reference_fill_ratio"  # per representation, 1 when filled
TESTS_TOTAL = "rag_drift_tests_total"
VECTORS_TOTAL = "rag_drift_vectors_total"
REJECTED_VECTORS_TOTAL = "rag_drift_rejected_vectors_total"
REFERENCE_VECTORS = "rag_drift_reference_vectors"
REPRESENTATIONS_EVICTED_TOTAL = "rag_drift_representations_evicted_total"
