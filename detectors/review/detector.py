"""The review detector: samples answers into the review queue and serves the reviewer's page.

``observe`` and ``observe_event`` run the sampler on the pipeline thread; what it takes
goes to a supervised worker that writes the store and publishes to Kafka, so the
pipeline never waits on SQLite or a broker. The worker's tick also releases the weekly
reading picks and enforces ``retention_days``. A verdict from the page counts judge
agreement and the agreement of the evaluations compared with review (on this replica
only: the counters are summed over replicas), sends the reviewed documents to the
false-exclusion detector as a ``Label`` (through the core's event hook), and is
published for the other replicas.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import structlog

from detectors.review.calibration import judge_of
from detectors.review.config import ReviewConfig
from detectors.review.metrics import ReviewMetrics
from detectors.review.model import ReviewItem, Verdict
from detectors.review.sampler import (
    Action,
    AttachEvaluation,
    AttachFeedback,
    AttachScore,
    Enqueue,
    ReviewSampler,
)
from detectors.review.store import ReviewStore
from monitor.contract.kafka_connection import KafkaConnection
from monitor.contract.rulekit.prediction_powered import RANDOM_STRATUM
from monitor.contract.shared import PassRules
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import Slicer
from monitor.contract.state import DEFAULT_STATE_MAX_BYTES
from monitor.contract.trace import Event, Label, RagTrace
from monitor.contract.variants import OTHER, PRODUCTION, bounded_label, variant_of
from monitor.contract.worker import Worker

if TYPE_CHECKING:
    from detectors.review.replication import ReviewPublisher, ReviewReader
    from detectors.review.web import ReviewPage

log = structlog.get_logger("rag_monitor.review")

QUEUE_SIZE = 10_000
RETENTION_EVERY_S = 3600.0
DRAIN_S = 5.0
PAGE_STOP_S = 5.0
DAY_S = 86_400.0

WorkItem = Action | Verdict  # a Verdict here: publish it


class ReviewDetector:
    """The human review loop's sampler, queue and page (README, "Human review")."""

    name: ClassVar[str] = "review"

    def __init__(
        self,
        config: ReviewConfig,
        registry: SidecarRegistry,
        state_dir: Path,
        *,
        kafka: KafkaConnection | None = None,
        emit: Callable[[Event], bool] = lambda _: False,
        token: str | None = None,
        clock: Callable[[], float] = time.time,
        state_max_bytes: int = DEFAULT_STATE_MAX_BYTES,
        rules: PassRules | None = None,
        slicer: Slicer | None = None,
    ) -> None:
        self.config = config
        self._slicer = slicer or Slicer()
        self.registry = registry
        self.metrics = ReviewMetrics(
            registry,
            enabled=config.enabled,
            compared=tuple(sorted(rules or ())),
            slicer=self._slicer,
        )
        self._state_dir = state_dir
        if config.enabled:  # review.sqlite3 shows in rag_monitor_state_bytes{file}
            registry.state_dir(state_dir, state_max_bytes)
        self._kafka = kafka if kafka is not None and kafka.bootstrap_servers else None
        self._emit = emit
        self._token = token
        self._clock = clock
        self.sampler = ReviewSampler(
            config, self.metrics, self._offer, clock, rules, slicer=self._slicer
        )
        # The evaluation label's allow-list: an item from a replica configured otherwise
        # may carry a name this one does not compare; it counts as other.
        self._compared = frozenset(rules or ())
        self.store: ReviewStore | None = None
        self.page: ReviewPage | None = None
        self._publisher: ReviewPublisher | None = None
        self._reader: ReviewReader | None = None
        self._next_retention = 0.0
        self._worker: Worker[WorkItem] = Worker(
            "review",
            handle=self._handle,
            queue_size=QUEUE_SIZE,
            tick_s=1.0,
            on_tick=self._tick,
            drain_s=DRAIN_S,
            supervisor=registry.supervisor,
        )

    # --- pipeline thread -----------------------------------------------------------------

    def observe(self, trace: RagTrace) -> None:
        # Only what users were served is reviewed: the non-production twin of a pair (a
        # shadow) shares its production request's session and query, and was never served.
        twin = trace.pair_id is not None and variant_of(trace) != PRODUCTION
        if self.store is not None and not twin:
            self.sampler.observe(trace)

    def observe_event(self, event: Event) -> None:
        if self.store is not None:
            self.sampler.observe_event(event)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if not self.config.enabled or self.store is not None:
            return
        self.store = ReviewStore(self._state_dir, clock=self._clock)
        if self._kafka is not None:
            from detectors.review.replication import ReviewPublisher, ReviewReader
            from monitor.contract.replication import client_settings

            settings = client_settings(self._kafka)
            self._publisher = ReviewPublisher(settings, self.config.topic, self.metrics)
            self._reader = ReviewReader(
                settings, self.config.topic, self.store, self.metrics, self.registry
            )
            self._reader.start()
        self._tick()
        self._worker.start()
        if self.config.http.enabled:
            from detectors.review.web import ReviewPage

            self.page = ReviewPage(
                self.config.http, self.store, self._token, self.on_verdict, self.registry
            )
            self.page.start()
            log.info("review_page_started", port=self.page.port)

    def shutdown(self) -> None:
        """Stop the page, drain the worker, stop the reader, close the store. Safe twice."""
        if self.page is not None:
            self.page.stop_intake(PAGE_STOP_S)
            self.page.shutdown()
            self.page = None
        self._worker.stop()
        if self._reader is not None:
            self._reader.shutdown()
            self._reader = None
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None
        if self.store is not None:
            self.store.close()
            self.store = None

    # --- the page's threads ------------------------------------------------------------------

    def on_verdict(self, item: ReviewItem, verdict: Verdict) -> None:
        """A reviewer recorded ``verdict`` on ``item`` (already stored by the page)."""
        stratum = RANDOM_STRATUM if RANDOM_STRATUM in item.strata else OTHER
        if item.hhem_score is not None and item.hhem_threshold is not None:
            hhem = "supported" if item.hhem_score >= item.hhem_threshold else "unsupported"
            judge = judge_of(item)
            self.metrics.judge_agreement(judge, stratum, hhem, verdict.supported).inc()
            slices = self._slicer.kept(item.slices)
            self.metrics.slice_agreement(slices, judge, stratum, hhem, verdict.supported)
        for name, outcome in item.evaluations:
            evaluation = bounded_label(name, self._compared)
            self.metrics.evaluation_agreement.labels(
                stratum, evaluation, outcome, verdict.supported
            ).inc()
        gold = tuple(dict.fromkeys((*verdict.relevant_doc_ids, *verdict.missing_doc_ids)))
        if gold:
            self._emit(Label(gold_doc_ids=gold, trace_id=item.trace_id))
        if self._publisher is not None:
            self._worker.offer(verdict)

    # --- the worker's thread ---------------------------------------------------------------

    def _offer(self, action: Action) -> bool:
        return self._worker.offer(action)

    def _handle(self, batch: list[WorkItem]) -> None:
        store = self.store
        assert store is not None
        for work in batch:
            if isinstance(work, Verdict):
                if self._publisher is not None:
                    self._publisher.verdict(work)
                continue
            if isinstance(work, Enqueue):
                store.add(work.item)
            elif isinstance(work, AttachScore):
                store.attach_score(
                    work.trace_id,
                    work.score,
                    work.threshold,
                    work.judge,
                    spans=work.spans,
                    tiers=work.tiers,
                )
            elif isinstance(work, AttachFeedback):
                store.attach_feedback(work.trace_id, work.kind)
            elif isinstance(work, AttachEvaluation):
                store.attach_evaluation(work.trace_id, work.name, work.outcome)
            if self._publisher is not None:
                queued = store.get(
                    work.item.trace_id if isinstance(work, Enqueue) else work.trace_id
                )
                if queued is not None:
                    self._publisher.item(queued)

    def _tick(self) -> None:
        store = self.store
        if store is None:
            return
        self.sampler.tick()
        now = self._clock()
        if now >= self._next_retention:
            self._next_retention = now + RETENTION_EVERY_S
            deleted = store.delete_older_than(now - self.config.retention_days * DAY_S)
            if deleted:
                self.metrics.deleted.inc(deleted)
                log.info("review_retention", deleted=deleted)
        self.metrics.queue_items.set(store.count())
