"""The shadow comparison's metrics; the replica that decides a pair's outcome records it,
so that a sum over replicas counts every pair once."""

from __future__ import annotations

from collections.abc import Collection

from prometheus_client import Counter, Gauge, Histogram

from detectors.shadow.model import (
    METRICS,
    PairOutcome,
    paired_deltas,
)
from detectors.shadow.names import (
    ANSWER_CHANGED_TOTAL,
    COST_DELTA_USD,
    EXCLUSION_DISAGREEMENTS_TOTAL,
    EXCLUSION_SCORED_TOTAL,
    FAITHFULNESS_DELTA,
    HALVES_PARTITIONS,
    HALVES_TOTAL,
    KAFKA_RECORDS_TOTAL,
    LATE_SIGNALS_TOTAL,
    LATENCY_DELTA_SECONDS,
    PAIRS_TOTAL,
    PENDING,
    RETRIEVAL_OVERLAP,
    UNSCORABLE_TOTAL,
)
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import STAGES
from monitor.contract.variants import PRODUCTION, bounded_label

# Symmetric around 0: a shadow can be faster or slower, cheaper or dearer.
_LATENCY = (0.01, 0.025, 0.05, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0)
LATENCY_BUCKETS = (*sorted(-b for b in _LATENCY), 0.0, *_LATENCY)
_COST = (0.00001, 0.0001, 0.001, 0.01, 0.1, 1.0)
COST_BUCKETS = (*sorted(-b for b in _COST), 0.0, *_COST)
FAITHFULNESS_BUCKETS = tuple(round(-1 + 0.1 * i, 1) for i in range(21))
OVERLAP_BUCKETS = tuple(round(0.1 * i, 1) for i in range(11))


class ShadowMetrics:
    """Paired deltas per joined pair and the outcome of every half (README, "Shadow")."""

    def __init__(self, registry: SidecarRegistry, variants: Collection[str]) -> None:
        # Halves read from Kafka carry a variant another replica folded; fold again here,
        # so that a label never takes a value from outside the configured list.
        self._variants = frozenset({PRODUCTION, *variants})

        def histogram(name: str, doc: str, buckets: tuple[float, ...], *labels: str) -> Histogram:
            return Histogram(name, doc, [*labels, "variant"], buckets=buckets, registry=registry)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, labels, registry=registry)

        self.latency = histogram(
            LATENCY_DELTA_SECONDS,
            "Shadow minus production latency per joined pair, by stage and shadow variant.",
            LATENCY_BUCKETS,
            "stage",
        )
        self.cost = histogram(
            COST_DELTA_USD,
            "Shadow minus production request cost (USD) per joined pair, by shadow variant.",
            COST_BUCKETS,
        )
        self.faithfulness = histogram(
            FAITHFULNESS_DELTA,
            "Shadow minus production judge score per joined pair whose twins were both scored.",
            FAITHFULNESS_BUCKETS,
        )
        self.overlap = histogram(
            RETRIEVAL_OVERLAP,
            "Jaccard overlap of the production and shadow retrieved sets per joined pair.",
            OVERLAP_BUCKETS,
        )
        self.pairs = counter(PAIRS_TOTAL, "Joined pairs, by shadow variant.", "variant")
        self.answer_changed = counter(
            ANSWER_CHANGED_TOTAL,
            "Joined pairs whose normalised answers differ, by shadow variant.",
            "variant",
        )
        self.exclusion_scored = counter(
            EXCLUSION_SCORED_TOTAL,
            "Joined pairs with a false-exclusion decision on both twins, by shadow variant.",
            "variant",
        )
        self.exclusion_disagreements = counter(
            EXCLUSION_DISAGREEMENTS_TOTAL,
            "Joined pairs whose twins' false-exclusion decisions differ: shadow_only (the "
            "shadow lost every eligible gold document, production did not) or production_only.",
            *("variant", "direction"),
        )
        self.unscorable = counter(
            UNSCORABLE_TOTAL,
            "Joined pairs without a delta for a metric (a twin lacked the value), by metric.",
            *("variant", "metric"),
        )
        self.halves = counter(
            HALVES_TOTAL,
            "Pair halves by outcome: joined, timed_out (no twin within pair_ttl_s), evicted "
            "(over max_pending), stopped (held at shutdown), duplicate, dropped (queue full).",
            *("variant", "outcome"),
        )
        self.late_signals = counter(
            LATE_SIGNALS_TOTAL,
            "Late signals (judge scores, false-exclusion decisions) not attached: late (pair "
            "final), unknown (half no longer held) or dropped (queue full).",
            *("kind", "result"),
        )
        self.kafka = counter(
            KAFKA_RECORDS_TOTAL,
            "Shadow records on Kafka by topic, direction and outcome (ok, failed, invalid).",
            *("topic", "direction", "outcome"),
        )
        self.pending = Gauge(
            PENDING, "Halves waiting for a twin and pairs settling.", ["kind"], registry=registry
        )
        self.partitions = Gauge(
            HALVES_PARTITIONS,
            "Partitions of halves_topic this replica owns in the group: it joins their pairs.",
            registry=registry,
        )

    def record(self, outcome: PairOutcome) -> None:
        """Count one outcome; a joined pair's deltas go to the histograms."""
        variant = self._variant(outcome.variant)
        if outcome.outcome != "joined":
            self.halves.labels(variant, outcome.outcome).inc()
            return
        self.halves.labels(PRODUCTION, "joined").inc()
        self.halves.labels(variant, "joined").inc()
        self.pairs.labels(variant).inc()
        deltas = paired_deltas(*outcome.both())
        for metric in METRICS:  # every metric's series, at 0 while all pairs are scorable
            self.unscorable.labels(variant, metric).inc(deltas[metric] is None)
        for stage in STAGES:
            delta = deltas[f"latency_{stage}"]  # type: ignore[index]
            if delta is not None:
                self.latency.labels(stage, variant).observe(delta)
        self._observe(self.cost, variant, deltas["cost_usd"])
        self._observe(self.faithfulness, variant, deltas["faithfulness"])
        self._observe(self.overlap, variant, deltas["retrieval_overlap"])
        # labels() makes a series at 0: a share of pairs reads 0, not "no data".
        self.answer_changed.labels(variant).inc(deltas["answer_changed"] or 0.0)
        exclusion = deltas["false_exclusion"]
        if exclusion is not None:
            self.exclusion_scored.labels(variant).inc()
            shadow_only = self.exclusion_disagreements.labels(variant, "shadow_only")
            production_only = self.exclusion_disagreements.labels(variant, "production_only")
            if exclusion:
                (shadow_only if exclusion > 0 else production_only).inc()

    def _variant(self, variant: str) -> str:
        return bounded_label(variant, self._variants)

    @staticmethod
    def _observe(histogram: Histogram, variant: str, value: float | None) -> None:
        if value is not None:
            histogram.labels(variant).observe(value)
