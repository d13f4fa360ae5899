"""The filter-exclusion detector's metrics: the false-exclusion ratio's counters (by
variant, and by slice), recall, the join's bookkeeping."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from detectors.filter_exclusion import names
from monitor.contract.names import (
    ELIGIBLE_QUERIES_TOTAL,
    FALSE_EXCLUSIONS_TOTAL,
    RETRIEVAL_RECALL,
    SLICE_EXCLUSION_QUERIES_TOTAL,
    SLICE_FALSE_EXCLUSIONS_TOTAL,
)
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import SliceCounter, Slicer
from monitor.contract.variants import ByVariant

# Recall of one query is a ratio of small integers: 0 and 1 need their own
# buckets (total loss, full recall); halves, thirds and quarters fall on edges.
RECALL_BUCKETS = (0.0, 0.1, 0.2, 0.25, 0.3, 1 / 3, 0.4, 0.5, 0.6, 2 / 3, 0.7, 0.75, 0.8, 0.9, 1.0)


class ExclusionMetrics:
    def __init__(
        self, registry: SidecarRegistry, recall_k: tuple[int, ...], slicer: Slicer
    ) -> None:
        def counter(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, registry=registry)

        def by_variant(name: str, documentation: str) -> ByVariant[Counter]:
            counter = Counter(name, documentation, ["variant"], registry=registry)
            return ByVariant(counter.labels)

        self.eligible_queries = by_variant(
            ELIGIBLE_QUERIES_TOTAL,
            "Labeled queries with at least one gold document the caller may see, by variant.",
        )
        self.false_exclusions = by_variant(
            FALSE_EXCLUSIONS_TOTAL,
            "Eligible queries whose every eligible gold document a relevance filter removed, "
            "by variant.",
        )
        self.slice_queries = SliceCounter(
            slicer,
            SLICE_EXCLUSION_QUERIES_TOTAL,
            "Labeled production queries with eligible gold, by slice.",
            registry,
        )
        self.slice_false_exclusions = SliceCounter(
            slicer,
            SLICE_FALSE_EXCLUSIONS_TOTAL,
            "Eligible production queries whose every eligible gold document a relevance "
            "filter removed, by slice.",
            registry,
        )
        self.eligible_gold_docs = counter(
            names.ELIGIBLE_GOLD_DOCS_TOTAL,
            "Gold documents the caller may see, summed over eligible queries.",
        )
        self.excluded_gold_docs = counter(
            names.EXCLUDED_GOLD_DOCS_TOTAL,
            "Eligible gold documents a relevance filter removed.",
        )
        self.no_eligible_gold = counter(
            names.NO_ELIGIBLE_GOLD_TOTAL,
            "Labeled queries whose gold the caller may not see (outside the denominator).",
        )
        self.unmatched_labels = counter(
            names.UNMATCHED_LABELS_TOTAL,
            "Labels that found no trace within join_ttl_s (or were dropped over max_pending).",
        )
        self.unmatched_probe_traces = counter(
            names.UNMATCHED_PROBE_TRACES_TOTAL,
            "Probe traces whose probe id had no gold within join_ttl_s.",
        )
        self.duplicate_labels = counter(
            names.DUPLICATE_LABELS_TOTAL,
            "Labels for a trace that already had one (the first wins).",
        )
        self.violations = counter(
            names.ENTITLEMENT_VIOLATIONS_TOTAL,
            "Documents of another tenant than the caller's among a request's contexts.",
        )
        histogram = Histogram(
            RETRIEVAL_RECALL,
            "Recall@k of the retrieved documents against the eligible gold set, per query.",
            ["k"],
            buckets=RECALL_BUCKETS,
            registry=registry,
        )
        self.recall = {k: histogram.labels(str(k)) for k in recall_k}
        self.pending = Gauge(
            names.JOIN_PENDING,
            "Labels and traces held while waiting to join.",
            ["kind"],
            registry=registry,
        )
