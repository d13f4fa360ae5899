"""Kafka collector: a consumer group reading trace, label and feedback topics.

At-least-once: a record's offset is committed only after every trace it fed
has passed the inline detectors (its ``Ticket`` is released), and only as a
contiguous prefix per partition. A record that cannot be decoded is copied to
the dead-letter topic with the reason and its origin in headers before its
offset counts as done. A broker that is down is retried with backoff; the
sidecar stays up and reports not-ready.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import orjson
import structlog
from kafka import ConsumerRebalanceListener, KafkaConsumer, KafkaProducer
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition

from collectors.otlp import PayloadError, decode_otlp_json, decode_otlp_proto
from collectors.records import parse_rag_trace
from monitor.events import InvalidRecord, parse_feedback, parse_labels
from monitor.kafka_config import KafkaConfig, PayloadFormat
from monitor.pipeline import Consumer, Events, SpanBatch, Ticket, WholeTrace, WorkItem
from monitor.worker import Worker

log = structlog.get_logger("rag_monitor.kafka")

_POLL_TIMEOUT_MS = 200
_COMMIT_INTERVAL_S = 1.0
_MAX_BACKOFF_S = 30.0
# A dead-letter write may wait 30 s for its broker: a stall is longer than that,
# and stop waits for it (the consumer is not safe to close under a running poll).
_STALL_S = 60.0
_STOP_TIMEOUT_S = 60.0
# Under ``collectors.kafka.consumer``. kafka-python waits 30 s by default for a
# broker that is down, and the stop flag is only seen between attempts: SIGTERM
# would wait that long (about a Kubernetes grace period). ``consumer`` may set
# it higher for slow handshakes.
_CONSUMER_DEFAULTS = {"max_poll_records": 500, "bootstrap_timeout_ms": 5000}
_NETWORK_CLIENT = KafkaConsumer.DEFAULT_CONFIG["kafka_client"]

REASON_HEADER = "rag-monitor-reason"
SOURCE_TOPIC_HEADER = "rag-monitor-source-topic"
SOURCE_PARTITION_HEADER = "rag-monitor-source-partition"
SOURCE_OFFSET_HEADER = "rag-monitor-source-offset"


def consumer_settings(config: KafkaConfig) -> dict[str, Any]:
    """The consumer's kafka-python settings: ours, then ``consumer`` and ``security``."""
    return {
        "bootstrap_servers": config.bootstrap_servers,
        "group_id": config.group_id,
        "enable_auto_commit": False,  # offsets are committed after processing
        "auto_offset_reset": "earliest",
        **_CONSUMER_DEFAULTS,
        **config.consumer,
        **config.security,
    }


def producer_settings(config: KafkaConfig) -> dict[str, Any]:
    """The dead-letter producer's kafka-python settings: no consumer tuning, only ``security``."""
    return {"bootstrap_servers": config.bootstrap_servers, "acks": "all", **config.security}


def decode_trace_record(value: bytes, payload_format: PayloadFormat) -> tuple[WorkItem, int]:
    """Decode one trace-topic record into a work item (without its ticket).

    Returns the item and the number of spans refused by validation. A record
    whose spans were all refused is invalid as a whole (it is dead-lettered);
    one with some valid spans is kept, like an OTLP partial success.
    """
    if payload_format == "auto":
        payload_format = sniff_format(value)
    if payload_format == "rag_trace_json":
        return WholeTrace(parse_rag_trace(value, "kafka")), 0
    decoded = (
        decode_otlp_proto(value) if payload_format == "otlp_proto" else decode_otlp_json(value)
    )
    if not decoded.spans:
        reason = decoded.first_error or "no spans"
        raise InvalidRecord(f"every span was rejected: {reason}" if decoded.rejected else reason)
    return SpanBatch(decoded.spans, "kafka"), decoded.rejected


def sniff_format(value: bytes) -> PayloadFormat:
    """Tell JSON (``rag-trace/1`` or OTLP/JSON) from OTLP protobuf by the first bytes."""
    if value.lstrip()[:1] != b"{":
        return "otlp_proto"
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        # A protobuf message may begin with "\n{" (field 1, length 123); one that
        # begins with "{" itself is broken JSON, and its dead-letter reason says so.
        return "otlp_json" if value[:1] == b"{" else "otlp_proto"
    if isinstance(document, dict) and document.get("schema") == "rag-trace/1":
        return "rag_trace_json"
    return "otlp_json"


class _OffsetTracker:
    """Offsets in flight per partition; yields the contiguous done prefix to commit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._issued: dict[TopicPartition, deque[int]] = {}
        self._done: dict[TopicPartition, set[int]] = {}

    def issue(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            self._issued.setdefault(tp, deque()).append(offset)
            self._done.setdefault(tp, set())

    def done(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            if tp in self._done:  # else: revoked meanwhile, the new owner re-reads it
                self._done[tp].add(offset)

    def committable(self, only: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Next offsets to commit for partitions whose done prefix advanced."""
        advanced = {}
        with self._lock:
            for tp, issued in self._issued.items():
                if only is not None and tp not in only:
                    continue
                done, last = self._done[tp], None
                while issued and issued[0] in done:
                    last = issued.popleft()
                    done.discard(last)
                if last is not None:
                    advanced[tp] = last + 1
        return advanced

    def in_flight(self) -> int:
        with self._lock:
            return sum(len(issued) for issued in self._issued.values())

    def partitions(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._issued)

    def forget(self, tps: set[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                self._issued.pop(tp, None)
                self._done.pop(tp, None)


class KafkaCollector:
    """Consumes the configured topics on its own thread."""

    port: int | None = None  # a client: it listens on no port

    def __init__(
        self,
        config: KafkaConfig,
        pipeline: Consumer,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
        producer_factory: Callable[..., KafkaProducer] = KafkaProducer,
    ) -> None:
        if config.bootstrap_servers is None:
            raise ValueError("collectors.kafka.bootstrap_servers is not set")
        self._config = config
        self._pipeline = pipeline
        self._consumer_factory = consumer_factory
        self._producer_factory = producer_factory
        self._consumer: KafkaConsumer | None = None
        self._producer: KafkaProducer | None = None
        self._offsets = _OffsetTracker()
        self._backoff = 1.0
        self._worker: Worker[None] = Worker(
            "kafka",
            step=self._step,
            tick_s=_POLL_TIMEOUT_MS / 1000,
            stop_timeout_s=_STOP_TIMEOUT_S,
            stall_after_s=_STALL_S,
            registry=pipeline.metrics.registry,
        )
        self._joined = False
        self._last_commit = time.monotonic()
        self._lag_topics: set[str] = set()

    def ready(self) -> bool:
        """True once the consumer has joined its group and holds its assignment."""
        return self._joined

    def start(self) -> None:
        self._worker.start()

    def stop_intake(self) -> None:
        """Stop polling; the consumer stays open so that ``shutdown`` can commit."""
        self._worker.stop()

    def shutdown(self) -> None:
        """Commit what the pipeline finished, then close. Safe before start and twice."""
        self.stop_intake()
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            self._commit(consumer)
            consumer.close(autocommit=False)
        producer, self._producer = self._producer, None
        if producer is not None:
            producer.close(timeout=5)
        self._joined = False

    # --- consumer thread -------------------------------------------------------------

    def _step(self) -> None:
        """One turn of the consumer thread (the worker calls it until stopped)."""
        try:
            if self._consumer is None:
                self._consumer = self._connect()
                self._backoff = 1.0
            self._poll_once(self._consumer)
        except KafkaError as exc:
            self._joined = self._joined and self._consumer is not None
            log.warning("kafka_unavailable", error=type(exc).__name__, retry_in_s=self._backoff)
            self._worker.pause(self._backoff)
            self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)
        except Exception:
            # A bug must not end intake silently. Start over from the committed
            # offsets: a record skipped mid-batch would otherwise fall into a
            # committed range unprocessed.
            log.exception("kafka_loop_failed", retry_in_s=self._backoff)
            self._restart_consumer()
            self._worker.pause(self._backoff)
            self._backoff = min(self._backoff * 2, _MAX_BACKOFF_S)

    def _restart_consumer(self) -> None:
        consumer, self._consumer = self._consumer, None
        self._joined = False
        self._offsets.forget(set(self._offsets.partitions()))
        if consumer is not None:
            consumer.close(autocommit=False)

    def _connect(self) -> KafkaConsumer:
        topics = self._config.topics
        subscribed = [*topics.traces, *(t for t in (topics.labels, topics.feedback) if t)]
        # kafka-python 3 starts a network client (an IO thread and sockets) before
        # its first bootstrap and leaks it when that fails: close it ourselves, or
        # every retry while the broker is down costs a thread.
        started: list[Any] = []

        def network_client(**configs: Any) -> Any:
            started.append(_NETWORK_CLIENT(**configs))
            return started[-1]

        try:
            consumer = self._consumer_factory(
                kafka_client=network_client, **consumer_settings(self._config)
            )
        except KafkaError:
            for client in started:
                client.close()
            raise
        consumer.subscribe(subscribed, listener=_Rebalance(self, consumer))
        log.info("kafka_subscribed", topics=subscribed, group_id=self._config.group_id)
        return consumer

    def _poll_once(self, consumer: KafkaConsumer) -> None:
        batches = consumer.poll(timeout_ms=_POLL_TIMEOUT_MS)
        for tp, records in batches.items():
            for record in records:
                if self._worker.stopping:
                    # Not handed over: rewind so a later poll or the next owner reads it again.
                    consumer.seek(tp, record.offset)
                    break
                self._handle(tp, record)
        if time.monotonic() - self._last_commit >= _COMMIT_INTERVAL_S:
            self._commit(consumer)
            self._report_lag(consumer)

    def _report_lag(self, consumer: KafkaConsumer) -> None:
        # The fetch high watermark, not end_offsets(): some brokers (Tansu) answer
        # ListOffsets "latest" with the last batch's base offset.
        lag: dict[str, int] = dict.fromkeys(self._lag_topics, 0)
        for tp in consumer.assignment():
            highwater = consumer.highwater(tp)
            try:
                position = consumer.position(tp, timeout_ms=0) if highwater is not None else None
            except KafkaError:  # revoked meanwhile, or no position yet
                continue
            if highwater is not None and position is not None:
                lag[tp.topic] = lag.get(tp.topic, 0) + max(0, highwater - position)
        for topic, records in lag.items():
            self._pipeline.metrics.kafka_lag.labels(topic).set(records)
        self._lag_topics = set(lag)

    def _handle(self, tp: TopicPartition, record: ConsumerRecord) -> None:
        topics = self._config.topics
        value: bytes = record.value or b""
        rejected = 0
        try:
            if record.topic == topics.labels:
                item: WorkItem = Events(parse_labels(value), "kafka")
            elif record.topic == topics.feedback:
                item = Events(parse_feedback(value), "kafka")
            else:
                item, rejected = decode_trace_record(value, self._config.format)
        except (InvalidRecord, PayloadError) as exc:
            self._dead_letter(record, str(exc))
            return
        except Exception as exc:
            # A decoder bug must not end this thread (the sidecar would stay ready
            # and read nothing): the record waits in the dead-letter topic instead.
            log.warning("kafka_decoder_failed", error=type(exc).__name__, exc_info=True)
            self._dead_letter(record, f"decoder failed: {type(exc).__name__}")
            return
        if rejected:
            self._pipeline.metrics.rejected_spans.labels("kafka").inc(rejected)
        self._offsets.issue(tp, record.offset)
        ticket = Ticket(partial(self._offsets.done, tp, record.offset))
        self._pipeline.submit(replace(item, ticket=ticket))

    def _dead_letter(self, record: ConsumerRecord, reason: str) -> None:
        metrics = self._pipeline.metrics
        topic = self._config.dead_letter_topic
        if topic is None:
            metrics.count_record("kafka", "invalid")
            return
        headers = [
            *(record.headers or []),
            (REASON_HEADER, reason.encode()),
            (SOURCE_TOPIC_HEADER, record.topic.encode()),
            (SOURCE_PARTITION_HEADER, str(record.partition).encode()),
            (SOURCE_OFFSET_HEADER, str(record.offset).encode()),
        ]
        backoff = 1.0
        while True:
            try:
                producer = self._dlq_producer()
                producer.send(topic, value=record.value, key=record.key, headers=headers).get(
                    timeout=30
                )
                break
            except KafkaError as exc:
                if self._worker.stopping:
                    raise  # left uncommitted: read again after the restart
                log.warning("dead_letter_failed", error=type(exc).__name__, retry_in_s=backoff)
                self._worker.pause(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
        metrics.count_record("kafka", "dead_lettered")
        tp = TopicPartition(record.topic, record.partition)
        self._offsets.issue(tp, record.offset)
        self._offsets.done(tp, record.offset)

    def _dlq_producer(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = self._producer_factory(**producer_settings(self._config))
        return self._producer

    def _commit(self, consumer: KafkaConsumer, only: set[TopicPartition] | None = None) -> None:
        self._last_commit = time.monotonic()
        offsets = self._offsets.committable(only)
        if not offsets:
            return
        try:
            consumer.commit({tp: OffsetAndMetadata(off, "", -1) for tp, off in offsets.items()})
        except KafkaError as exc:
            # The records will be read again by whoever owns the partition: at-least-once.
            log.warning("kafka_commit_failed", error=type(exc).__name__)


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, collector: KafkaCollector, consumer: KafkaConsumer) -> None:
        self._collector = collector
        self._consumer = consumer

    def on_partitions_revoked(self, revoked: Any) -> None:
        revoked = set(revoked)
        self._collector._commit(self._consumer, only=revoked)
        self._collector._offsets.forget(revoked)

    def on_partitions_assigned(self, assigned: Any) -> None:
        self._collector._joined = True
        log.info("kafka_assigned", partitions=len(assigned))
