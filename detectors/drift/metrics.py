"""The drift detector's series, all with ``signal="query_embedding"``.

A result gauge (statistic, p-value, verdict, time of the last test) has no
sample until the first test gives it one: a 0 before any evidence would read
as the strongest drift (p = 0) or as a clean verdict. The p-value stays absent
in online mode, which has none.

The representation series carry a ``representation`` label: at most
``max_representations`` values at a time (``other`` folds the rest of the share), a
series removed when its representation leaves the current traffic or is evicted.
"""

from __future__ import annotations

from typing import Literal

from prometheus_client import Counter, Gauge

from detectors.drift.names import (
    DETECTED,
    LAST_TEST,
    MMD_STATISTIC,
    P_VALUE,
    REFERENCE_FILL,
    REFERENCE_VECTORS,
    REJECTED_VECTORS_TOTAL,
    REPRESENTATION_CHANGES,
    REPRESENTATION_INFO,
    REPRESENTATION_SHARE,
    REPRESENTATIONS_EVICTED_TOTAL,
    TESTS_TOTAL,
    VECTORS_TOTAL,
)
from detectors.drift.result import DriftResult
from monitor.contract.sidecar_registry import SidecarRegistry

SIGNAL = "query_embedding"
RejectReason = Literal["wrong_dimension", "not_finite", "queue_full", "unusable_reference"]


class DriftMetrics:
    """The detector's counters and gauges on an injected registry."""

    def __init__(self, registry: SidecarRegistry) -> None:
        # Labelled, with no child made here: absent until ``show`` sets one.
        self.statistic = Gauge(
            MMD_STATISTIC,
            "MMD^2 of the last tested window against the reference (online: test statistic); "
            "absent until the first test.",
            ["signal"],
            registry=registry,
        )
        self.p_value = Gauge(
            P_VALUE,
            "Permutation p-value of the last drift test; absent until the first test and in "
            "online mode, which has none.",
            ["signal"],
            registry=registry,
        )
        self.detected = Gauge(
            DETECTED,
            "1 when the last drift test rejected 'same distribution as the reference'; "
            "absent until the first test.",
            ["signal"],
            registry=registry,
        )
        self.last_test = Gauge(
            LAST_TEST,
            "Unix time of the last drift test (online: of the last vector tested); absent "
            "until the first test.",
            ["signal"],
            registry=registry,
        )
        self.tests = Counter(
            TESTS_TOTAL,
            "Drift tests run, by outcome (drift, no_drift).",
            ["signal", "outcome"],
            registry=registry,
        )
        self.vectors = Counter(
            VECTORS_TOTAL,
            "Vectors accepted by the drift detector.",
            ["signal"],
            registry=registry,
        ).labels(SIGNAL)
        self.rejected = Counter(
            REJECTED_VECTORS_TOTAL,
            "Vectors refused: wrong_dimension, not_finite (NaN/inf), queue_full, "
            "unusable_reference (a reference the test cannot use, e.g. all vectors identical).",
            ["signal", "reason"],
            registry=registry,
        )
        self.reference_size = Gauge(
            REFERENCE_VECTORS,
            "Vectors in the reference (below reference_size while it is being filled).",
            ["signal"],
            registry=registry,
        ).labels(SIGNAL)
        self._add_representation_series(registry)

    def _add_representation_series(self, registry: SidecarRegistry) -> None:
        self.representation_changes = Counter(
            REPRESENTATION_CHANGES,
            "Times a representation (embedding model) not in the last window_size vectors "
            "appeared: an encoder change, never counted as drift.",
            ["signal"],
            registry=registry,
        ).labels(SIGNAL)
        self.representations_evicted = Counter(
            REPRESENTATIONS_EVICTED_TOTAL,
            "Representations no longer tracked because max_representations newer ones came.",
            ["signal"],
            registry=registry,
        ).labels(SIGNAL)
        self.representation_info = Gauge(
            REPRESENTATION_INFO,
            "1 for each representation (the query vectors' embedding model, or unknown when "
            "untagged) among the last window_size vectors.",
            ["representation"],
            registry=registry,
        )
        self.representation_share = Gauge(
            REPRESENTATION_SHARE,
            "Share of each representation among the last window_size vectors (other: those "
            "beyond max_representations).",
            ["representation"],
            registry=registry,
        )
        self.reference_fill = Gauge(
            REFERENCE_FILL,
            "Share of reference_size collected for each tracked representation's reference "
            "(1: tested against it).",
            ["representation"],
            registry=registry,
        )

    def reject(self, reason: RejectReason, count: int = 1) -> None:
        self.rejected.labels(SIGNAL, reason).inc(count)

    def show(self, result: DriftResult, at: float) -> None:
        """Set the result gauges from ``result``, tested at ``at`` (Unix time)."""
        self.statistic.labels(SIGNAL).set(result.statistic)
        if result.p_value is not None:
            self.p_value.labels(SIGNAL).set(result.p_value)
        self.detected.labels(SIGNAL).set(1 if result.is_drift else 0)
        self.last_test.labels(SIGNAL).set(at)
