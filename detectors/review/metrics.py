"""The review loop's metrics, declared once on the registry the detector is given."""

from __future__ import annotations

import itertools
import threading

from prometheus_client import Counter, Gauge

from detectors.review.model import EVALUATION_OUTCOMES, SUPPORTED
from detectors.review.names import (
    KAFKA_RECORDS_TOTAL,
    QUEUE_ITEMS,
    RETENTION_DELETED_TOTAL,
    SAMPLED_TOTAL,
    SKIPPED_TOTAL,
)
from monitor.contract.missing import MissingInputs
from monitor.contract.names import (
    EVALUATION_AGREEMENT_TOTAL,
    JUDGE_AGREEMENT_TOTAL,
    SLICE_JUDGE_AGREEMENT_TOTAL,
)
from monitor.contract.rulekit.prediction_powered import RANDOM_STRATUM
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import Slice, SliceCounter, Slicer
from monitor.contract.variants import OTHER

# The agreement counters' stratum: random (the item was drawn at random, whatever else
# took it too) or other. Only the random items estimate the population's pass share.
AGREEMENT_STRATA = (RANDOM_STRATUM, OTHER)
JUDGE_VERDICTS = ("supported", "unsupported")


class ReviewMetrics:
    """Sampled and skipped items per stratum, judge and evaluation agreement, the queue's size."""

    def __init__(
        self,
        registry: SidecarRegistry,
        *,
        enabled: bool = True,
        compared: tuple[str, ...] = (),
        slicer: Slicer | None = None,
    ) -> None:
        # A trace without a query or an answer gives a reviewer nothing to judge.
        self.missing = MissingInputs(registry, "review", ("query", "answer") if enabled else ())
        self.sampled = Counter(
            SAMPLED_TOTAL,
            "Items queued for human review, by stratum (an item may count in several).",
            ["stratum"],
            registry=registry,
        )
        self.skipped = Counter(
            SKIPPED_TOTAL,
            "Items a stratum selected but did not queue, by stratum and reason: max_per_hour "
            "(the stratum's bound), expired (the trace had left the sampler's buffer), "
            "queue_full (the store worker's queue was full).",
            ["stratum", "reason"],
            registry=registry,
        )
        self._judge_agreement = Counter(
            JUDGE_AGREEMENT_TOTAL,
            "Reviewed items the faithfulness judge scored, by stratum (random: drawn at "
            "random; other), the judge's verdict at its threshold (label hhem: supported, "
            "unsupported), the reviewer's answer-supported value (yes, partly, no, "
            "no_claim) and the judge that scored the item (its identity, as on the "
            "faithfulness detector's judge info gauge).",
            ["stratum", "hhem", "human", "judge"],
            registry=registry,
        )
        self._judges: set[str] = set()
        self._slice_agreement = SliceCounter(
            slicer or Slicer(),
            SLICE_JUDGE_AGREEMENT_TOTAL,
            "Reviewed items the faithfulness judge scored, as the judge agreement counter "
            "counts them, by the slices of their request.",
            registry,
            ["stratum", "hhem", "human", "judge"],
        )
        self._slice_judges: set[tuple[Slice, str]] = set()
        self.evaluation_agreement = Counter(
            EVALUATION_AGREEMENT_TOTAL,
            "Reviewed items with a result of an evaluation set compare_with_review, by "
            "stratum (random, other), evaluation (a configured name, or other), its outcome "
            "by the pass rule (pass, fail) and the reviewer's answer-supported value (yes, "
            "partly, no, no_claim).",
            ["stratum", "evaluation", "outcome", "human"],
            registry=registry,
        )
        if enabled:  # every cell from the start: a share over the window reads 0, not nothing
            for stratum in AGREEMENT_STRATA:
                for human in SUPPORTED:
                    for name in compared:
                        for outcome in EVALUATION_OUTCOMES:
                            self.evaluation_agreement.labels(stratum, name, outcome, human)
        self._lock = threading.Lock()
        self.queue_items = Gauge(
            QUEUE_ITEMS, "Items in the review queue (reviewed or not).", registry=registry
        )
        self.deleted = Counter(
            RETENTION_DELETED_TOTAL,
            "Items deleted from the review queue by detectors.review.retention_days.",
            registry=registry,
        )
        self.kafka = Counter(
            KAFKA_RECORDS_TOTAL,
            "Review records on Kafka by direction (published, consumed) and outcome "
            "(ok, failed, invalid).",
            ["direction", "outcome"],
            registry=registry,
        )

    def judge_agreement(self, judge: str, stratum: str, verdict: str, human: str) -> Counter:
        """The agreement cell of one reviewed item. A judge's first review creates all its
        cells, so a share over the window reads 0, not nothing, from then on."""
        with self._lock:
            if judge not in self._judges:
                self._judges.add(judge)
                for cell_stratum in AGREEMENT_STRATA:
                    for cell_human in SUPPORTED:
                        for cell_verdict in JUDGE_VERDICTS:
                            self._judge_agreement.labels(
                                cell_stratum, cell_verdict, cell_human, judge
                            )
        return self._judge_agreement.labels(stratum, verdict, human, judge)

    def slice_agreement(
        self, slices: tuple[Slice, ...], judge: str, stratum: str, verdict: str, human: str
    ) -> None:
        """One reviewed item in each of its slices; a (slice, judge)'s first review creates
        all its cells, as ``judge_agreement`` does."""
        with self._lock:
            for found in slices:
                if (found, judge) in self._slice_judges:
                    continue
                self._slice_judges.add((found, judge))
                for cell in itertools.product(AGREEMENT_STRATA, JUDGE_VERDICTS, SUPPORTED):
                    self._slice_agreement.inc((found,), *cell, judge, amount=0.0)
        self._slice_agreement.inc(slices, stratum, verdict, human, judge)
