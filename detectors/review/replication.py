"""The review queue on Kafka: items to ``<topic>``, verdicts to ``<topic>-verdicts``.

Publishing lets a team feed its own tool from the topic (JSON, ``rag-review/1`` and
``rag-review-verdict/1``; key: the trace id). Reading makes N replicas one queue: every
replica reads both topics whole (``monitor.contract.replication.WholeTopicReader``) into its own
store, so that any replica's page shows every item and every verdict. Adding is
idempotent (a known trace merges), and a verdict replaces the one before, so reading
one's own records back changes nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import orjson
from kafka import KafkaConsumer

from detectors.review.metrics import ReviewMetrics
from detectors.review.model import ReviewItem, Verdict
from detectors.review.store import (
    ReviewStore,
    item_from_record,
    item_record,
    verdict_from_record,
    verdict_record,
)
from monitor.contract.replication import TopicPublisher, WholeTopicReader
from monitor.contract.sidecar_registry import SidecarRegistry

# Verdicts read before their item (the topics are read independently) wait here.
MAX_EARLY_VERDICTS = 10_000


def verdicts_topic(topic: str) -> str:
    return f"{topic}-verdicts"


class ReviewPublisher:
    """Sends items and verdicts; called from the detector's worker only."""

    def __init__(self, settings: dict[str, Any], topic: str, metrics: ReviewMetrics) -> None:
        self._topic = topic

        def sent(_topic: str, ok: bool) -> None:
            metrics.kafka.labels("published", "ok" if ok else "failed").inc()

        self._publisher = TopicPublisher(settings, sent, "review")

    def item(self, item: ReviewItem) -> None:
        self._publisher.send(self._topic, item.trace_id, item_record(item))

    def verdict(self, verdict: Verdict) -> None:
        self._publisher.send(verdicts_topic(self._topic), verdict.trace_id, verdict_record(verdict))

    def close(self) -> None:
        self._publisher.close()


class ReviewReader:
    """Reads both review topics whole into ``store`` on a supervised worker."""

    def __init__(
        self,
        settings: dict[str, Any],
        topic: str,
        store: ReviewStore,
        metrics: ReviewMetrics,
        registry: SidecarRegistry,
        *,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
    ) -> None:
        self._topics = (topic, verdicts_topic(topic))
        self._store = store
        self._metrics = metrics
        self._early: OrderedDict[str, Verdict] = OrderedDict()
        self._reader = WholeTopicReader(
            "review-reader",
            settings,
            self._topics,
            self._take,
            registry,
            consumer_factory=consumer_factory,
        )

    def start(self) -> None:
        self._reader.start()

    def shutdown(self) -> None:
        self._reader.shutdown()

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
