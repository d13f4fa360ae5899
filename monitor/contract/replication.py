"""Sharing a detector's records between replicas through Kafka.

``TopicPublisher`` sends JSON records keyed by an id; ``WholeTopicReader`` reads topics
whole, without a consumer group (every partition assigned, from the beginning), on a
supervised worker, so that every replica sees every record (the review queue, the shadow
pair store). Readers must take a record idempotently: a replica reads its own records
back, and every restart reads the topics again from the start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson
import structlog
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaError

from monitor.contract.kafka_connection import KafkaConnection
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.worker import Worker

log = structlog.get_logger("rag_monitor.replication")

POLL_MS = 200
SEND_BLOCK_MS = 5000
RETRY_S = 1.0


def client_settings(kafka: KafkaConnection) -> dict[str, Any]:
    """The brokers and the security settings of ``collectors.kafka``, for a producer or a
    group-less reader of a detector's own topics."""
    return {"bootstrap_servers": kafka.bootstrap_servers, **kafka.security}


class TopicPublisher:
    """Sends records; ``on_sent(topic, ok)`` counts each. Call it from one thread."""

    def __init__(
        self, settings: dict[str, Any], on_sent: Callable[[str, bool], None], name: str
    ) -> None:
        self._settings = settings
        self._on_sent = on_sent
        self._name = name  # the log lines' ``publisher``
        self._producer: KafkaProducer | None = None
        self._failing = False

    def send(self, topic: str, key: str, record: dict[str, Any]) -> None:
        try:
            if self._producer is None:
                # A missing topic or broker must not hold the caller past its stall limit.
                self._producer = KafkaProducer(
                    **self._settings, acks="all", linger_ms=5, max_block_ms=SEND_BLOCK_MS
                )
            self._producer.send(topic, key=key.encode(), value=orjson.dumps(record))
        except KafkaError as exc:
            self._on_sent(topic, False)
            if not self._failing:  # one line per outage; the record's text is never logged
                self._failing = True
                log.warning(
                    "publish_failed", publisher=self._name, topic=topic, error=type(exc).__name__
                )
            return
        self._failing = False
        self._on_sent(topic, True)

    def flush(self) -> None:
        if self._producer is not None:
            self._producer.flush(timeout=5)

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(timeout=5)
            self._producer.close(timeout=5)
            self._producer = None


class TopicReader:
    """Polls a consumer on a supervised worker named ``name``, handing ``take(topic, value)``
    every record. ``connect`` makes the consumer (None: not possible yet, retry later);
    after a broker error a fresh one replaces it. ``after_poll`` runs after every poll,
    ``before_close`` once at the stop, before the consumer closes."""

    def __init__(
        self,
        name: str,
        connect: Callable[[], KafkaConsumer | None],
        take: Callable[[str, bytes], None],
        registry: SidecarRegistry,
        *,
        after_poll: Callable[[KafkaConsumer], None] = lambda _: None,
        before_close: Callable[[], None] = lambda: None,
    ) -> None:
        self._connect = connect
        self._take = take
        self._after_poll = after_poll
        self._before_close = before_close
        self._consumer: KafkaConsumer | None = None
        self._failing = False
        self._worker: Worker[None] = Worker(
            name, step=self._step, finish=self._finish, supervisor=registry.supervisor
        )

    def start(self) -> None:
        self._worker.start()

    def shutdown(self) -> None:
        self._worker.stop()

    def _step(self) -> None:
        try:
            if self._consumer is None:
                self._consumer = self._connect()
                if self._consumer is None:
                    self._worker.pause(RETRY_S)
                    return
            batches = self._consumer.poll(timeout_ms=POLL_MS)
        except KafkaError as exc:  # broker away: retry with a fresh consumer
            if not self._failing:
                self._failing = True
                log.warning("read_failed", reader=self._worker.name, error=type(exc).__name__)
            self._close()
            self._worker.pause(RETRY_S)
            return
        self._failing = False
        for records in batches.values():
            for record in records:
                self._take(record.topic, record.value)
        self._after_poll(self._consumer)

    def _finish(self) -> None:
        self._before_close()
        self._close()

    def _close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


class WholeTopicReader(TopicReader):
    """Reads ``topics`` whole: a group-less consumer on every partition, from the start;
    retries while the broker is away or a topic does not exist yet."""

    def __init__(
        self,
        name: str,
        settings: dict[str, Any],
        topics: Sequence[str],
        take: Callable[[str, bytes], None],
        registry: SidecarRegistry,
        *,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
    ) -> None:
        self._settings = settings
        self._topics = tuple(topics)
        self._factory = consumer_factory
        super().__init__(name, self._assign, take, registry)

    def _assign(self) -> KafkaConsumer | None:
        """None while a topic does not exist yet."""
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
