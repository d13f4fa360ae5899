"""The review queue on Kafka: items to ``<topic>``, verdicts to ``<topic>-verdicts``.

Publishing lets a team feed its own tool from the topic (JSON, ``rag-review/1`` and
``rag-review-verdict/1``; key: the trace id). Reading makes N replicas one queue: every
replica reads both topics whole, without a consumer group (every partition assigned,
from the beginning), into its own store, so that any replica's page shows every item
and every verdict. Adding is idempotent (a known trace merges), and a verdict replaces
the one before, so reading one's own records back changes nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson
import structlog
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError
from prometheus_client import CollectorRegistry

from detectors.review.metrics import ReviewMetrics
from detectors.review.model import ReviewItem, Verdict
from detectors.review.store import (
    ReviewStore,
    item_from_record,
    item_record,
    verdict_from_record,
    verdict_record,
)
from monitor.worker import Worker

log = structlog.get_logger("rag_monitor.review")

POLL_MS = 200
SEND_BLOCK_MS = 5000
RETRY_S = 1.0
# Verdicts read before their item (the topics are read independently) wait here.
MAX_EARLY_VERDICTS = 10_000


def verdicts_topic(topic: str) -> str:
    return f"{topic}-verdicts"


class ReviewPublisher:
    """Sends items and verdicts; called from the detector's worker only."""

    def __init__(self, settings: dict[str, Any], topic: str, metrics: ReviewMetrics) -> None:
        self._settings = settings
        self._topic = topic
        self._metrics = metrics
        self._producer: KafkaProducer | None = None
        self._failing = False

    def item(self, item: ReviewItem) -> None:
        self._send(self._topic, item.trace_id, item_record(item))

    def verdict(self, verdict: Verdict) -> None:
        self._send(verdicts_topic(self._topic), verdict.trace_id, verdict_record(verdict))

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(timeout=5)
            self._producer.close(timeout=5)
            self._producer = None

    def _send(self, topic: str, key: str, record: dict[str, Any]) -> None:
        try:
            if self._producer is None:
                # A missing topic or broker must not hold the worker past its stall limit.
                self._producer = KafkaProducer(
                    **self._settings, acks="all", linger_ms=5, max_block_ms=SEND_BLOCK_MS
                )
            self._producer.send(topic, key=key.encode(), value=orjson.dumps(record))
        except KafkaError as exc:
            self._metrics.kafka.labels("published", "failed").inc()
            if not self._failing:  # one line per outage; the record's text is never logged
                self._failing = True
                log.warning("review_publish_failed", topic=topic, error=type(exc).__name__)
            return
        self._failing = False
        self._metrics.kafka.labels("published", "ok").inc()


class ReviewReader:
    """Reads both review topics whole into ``store`` on a supervised worker."""

    def __init__(
        self,
        settings: dict[str, Any],
        topic: str,
        store: ReviewStore,
        metrics: ReviewMetrics,
        registry: CollectorRegistry,
        *,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
    ) -> None:
        self._settings = settings
        self._topics = (topic, verdicts_topic(topic))
        self._store = store
        self._metrics = metrics
        self._factory = consumer_factory
        self._consumer: KafkaConsumer | None = None
        self._early: OrderedDict[str, Verdict] = OrderedDict()
        self._failing = False
        self._worker: Worker[None] = Worker(
            "review-reader", step=self._step, finish=self._close, registry=registry
        )

    def start(self) -> None:
        self._worker.start()

    def shutdown(self) -> None:
        self._worker.stop()

    def _step(self) -> None:
        try:
            if self._consumer is None:
                self._consumer = self._assign()
                if self._consumer is None:
                    self._worker.pause(RETRY_S)
                    return
            batches = self._consumer.poll(timeout_ms=POLL_MS)
        except KafkaError as exc:  # broker away: retry with a fresh consumer
            if not self._failing:
                self._failing = True
                log.warning("review_read_failed", error=type(exc).__name__)
            self._close()
            self._worker.pause(RETRY_S)
            return
        self._failing = False
        for records in batches.values():
            for record in records:
                self._take(record.topic, record.value)

    def _assign(self) -> KafkaConsumer | None:
        """A group-less consumer on every partition of both topics, from the start; None
        while a topic does not exist yet."""
        consumer = self._factory(**self._settings, enable_auto_commit=False, group_id=None)
        partitions = []
        for topic in self._topics:
            found = consumer.partitions_for_topic(topic)
            if not found:
                consumer.close()
                return None
            partitions += [TopicPartition(topic, p) for p in sorted(found)]
        consumer.assign(partitions)
        consumer.seek_to_beginning(*partitions)
        return consumer

    def _take(self, topic: str, value: bytes) -> None:
        try:
            record = orjson.loads(value)
            if topic == self._topics[0]:
                self._store.add(item_from_record(record))
                verdict = self._early.pop(record["trace_id"], None)
                if verdict is not None:
                    self._store.record(verdict)
            else:
                verdict = verdict_from_record(record)
                if self._store.record(verdict) is None:
                    self._early[verdict.trace_id] = verdict
                    while len(self._early) > MAX_EARLY_VERDICTS:
                        self._early.popitem(last=False)
        except (ValueError, KeyError, TypeError):
            self._metrics.kafka.labels("consumed", "invalid").inc()
            return
        self._metrics.kafka.labels("consumed", "ok").inc()

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
