"""The shadow comparison: pairs each production request with its shadow twin.

``observe`` runs on the pipeline thread and only takes the half of a trace that carries a
pair id (numbers and hashes, cheap) and hands it to the detector's worker; a judge's score
(``JudgeScore``) and a false-exclusion decision (``ExclusionOutcome``) of a recent half
follow it as signals. Without Kafka the worker joins the halves itself and stores each
outcome; with Kafka it publishes them, and the halves meet at one replica
(``replication.py``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import orjson
import structlog

from detectors.shadow.config import ShadowConfig
from detectors.shadow.join import PairJoin
from detectors.shadow.metrics import ShadowMetrics
from detectors.shadow.model import (
    PairHalf,
    PairOutcome,
    Signal,
    SignalKind,
    half_of,
    half_record,
    outcome_from_record,
    outcome_record,
    signal_record,
)
from detectors.shadow.runner import JoinRunner
from detectors.shadow.store import PairStore
from monitor.contract.kafka_connection import KafkaConnection
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.state import DEFAULT_STATE_MAX_BYTES
from monitor.contract.trace import Event, ExclusionOutcome, JudgeScore, RagTrace
from monitor.contract.variants import DEFAULT_VARIANTS
from monitor.contract.worker import Worker

if TYPE_CHECKING:
    from monitor.contract.replication import TopicPublisher

log = structlog.get_logger("rag_monitor.shadow")

QUEUE_SIZE = 10_000
DRAIN_S = 5.0
RETENTION_EVERY_S = 3600.0
DAY_S = 86_400.0

Message = PairHalf | Signal


class ShadowDetector:
    """Joins pair halves and exports paired deltas (README, "Shadow comparison")."""

    name: ClassVar[str] = "shadow"

    def __init__(
        self,
        config: ShadowConfig,
        registry: SidecarRegistry,
        state_dir: Path,
        *,
        kafka: KafkaConnection | None = None,
        variants: Collection[str] = DEFAULT_VARIANTS,
        keep_text: bool = False,
        state_max_bytes: int = DEFAULT_STATE_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.registry = registry
        self.metrics = ShadowMetrics(registry, variants)
        self._state_dir = state_dir
        if config.enabled:  # shadow.sqlite3 shows in rag_monitor_state_bytes{file}
            registry.state_dir(state_dir, state_max_bytes)
        self._kafka = kafka if kafka is not None and kafka.bootstrap_servers else None
        self._keep_text = keep_text
        self._clock = clock
        self._wall_clock = wall_clock
        # Trace id -> pair id of recent halves, for their late signals (pipeline thread).
        self._recent: OrderedDict[str, str] = OrderedDict()
        self.store: PairStore | None = None
        self._join = PairJoin(
            pair_ttl_s=config.pair_ttl_s,
            settle_s=config.settle_s,
            max_pending=config.max_pending,
            wall_clock=wall_clock,
        )
        self._runner: JoinRunner | None = None
        self._publisher: TopicPublisher | None = None
        self._stoppers: list[Callable[[], None]] = []
        self._next_retention = 0.0
        self._worker: Worker[Message] = Worker(
            "shadow",
            handle=self._handle,
            queue_size=QUEUE_SIZE,
            tick_s=0.5,
            on_tick=self._tick,
            drain_s=DRAIN_S,
            supervisor=registry.supervisor,
        )

    # --- pipeline thread -----------------------------------------------------------------

    def observe(self, trace: RagTrace) -> None:
        if self.store is None or trace.pair_id is None:
            return
        half = half_of(trace, keep_text=self._keep_text)
        self._recent[trace.trace_id] = trace.pair_id
        self._recent.move_to_end(trace.trace_id)
        while len(self._recent) > self.config.max_pending:
            self._recent.popitem(last=False)
        if not self._worker.offer(half):
            self.metrics.halves.labels(half.variant, "dropped").inc()

    def observe_event(self, event: Event) -> None:
        if self.store is None:
            return
        if isinstance(event, JudgeScore):
            signal = self._signal(event.trace_id, "faithfulness", event.score)
        elif isinstance(event, ExclusionOutcome):
            signal = self._signal(event.trace_id, "false_exclusion", float(event.excluded))
        else:
            return
        if signal is not None and not self._worker.offer(signal):
            self.metrics.late_signals.labels(signal.kind, "dropped").inc()

    def _signal(self, trace_id: str, kind: SignalKind, value: float) -> Signal | None:
        pair_id = self._recent.get(trace_id)
        return None if pair_id is None else Signal(pair_id, trace_id, kind, value)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        if not self.config.enabled or self.store is not None:
            return
        store = self.store = PairStore(self._state_dir)
        if self._kafka is None:
            self._runner = JoinRunner(self._join, self.metrics, store.add, self._clock)
        else:
            self._start_replication(self._kafka, store)
        self._worker.start()

    def _start_replication(self, kafka: KafkaConnection, store: PairStore) -> None:
        from detectors.shadow.replication import HalvesConsumer
        from monitor.contract.replication import TopicPublisher, WholeTopicReader, client_settings

        settings = client_settings(kafka)
        config, metrics = self.config, self.metrics

        def sent(topic: str, ok: bool) -> None:
            kind = "halves" if topic == config.halves_topic else "pairs"
            metrics.kafka.labels(kind, "published", "ok" if ok else "failed").inc()

        def read(_topic: str, value: bytes) -> None:
            try:
                outcome = outcome_from_record(orjson.loads(value))
            except (ValueError, KeyError, TypeError):
                metrics.kafka.labels("pairs", "consumed", "invalid").inc()
                return
            metrics.kafka.labels("pairs", "consumed", "ok").inc()
            store.add(outcome)

        self._publisher = TopicPublisher(settings, sent, "shadow-halves")
        pairs = TopicPublisher(settings, sent, "shadow-pairs")  # the join thread's own

        def publish(outcome: PairOutcome) -> None:
            pairs.send(config.pairs_topic, outcome.pair_id, outcome_record(outcome))

        runner = JoinRunner(self._join, metrics, publish, self._clock)
        joiner = HalvesConsumer(
            kafka,
            config.halves_topic,
            config.group_id,
            runner=runner,
            metrics=metrics,
            registry=self.registry,
            on_stop=pairs.close,
        )
        reader = WholeTopicReader(
            "shadow-pairs-reader", settings, [config.pairs_topic], read, self.registry
        )
        joiner.start()
        reader.start()
        self._stoppers = [joiner.shutdown, reader.shutdown]

    def shutdown(self) -> None:
        """Drain the worker, settle what the join holds, stop Kafka, close the store.
        Safe before start and twice."""
        self._worker.stop()
        if self._runner is not None:
            self._runner.drain()
            self._runner = None
        if self._publisher is not None:
            self._publisher.close()
            self._publisher = None
        for stop in self._stoppers:
            stop()
        self._stoppers = []
        if self.store is not None:
            self.store.close()
            self.store = None

    # --- the worker's thread -----------------------------------------------------------------

    def _handle(self, batch: list[Message]) -> None:
        for message in batch:
            if self._runner is not None:
                self._runner.take(message)
            elif self._publisher is not None:
                self._publisher.send(self.config.halves_topic, message.pair_id, _record(message))

    def _tick(self) -> None:
        if self._runner is not None:
            self._runner.expire()
        store = self.store
        now = self._wall_clock()
        if store is None or now < self._next_retention:
            return
        self._next_retention = now + RETENTION_EVERY_S
        deleted = store.delete_older_than(now - self.config.retention_days * DAY_S)
        if deleted:
            log.info("shadow_retention", deleted=deleted)


def _record(message: Message) -> dict[str, Any]:
    return half_record(message) if isinstance(message, PairHalf) else signal_record(message)
