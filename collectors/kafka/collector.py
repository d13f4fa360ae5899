"""Kafka collector: a consumer group reading trace, label, feedback and logs topics.

The logs topic holds OTLP log exports, as the OpenTelemetry Collector's kafka exporter
writes them: their ``gen_ai.evaluation.result`` records become evaluation events, as on
``/v1/logs`` (``collectors/otlp/logs.py``).

At-least-once: a record's offset is committed only after every trace it fed
has passed the inline detectors (its ``Ticket`` is released), and only as a
contiguous prefix per partition, on a short time-and-count cadence
(``commit_interval_s``, ``commit_every_records``) so that a crash replays few
records. A record that cannot be decoded goes to the dead-letter topic
(``collectors/kafka/dead_letter.py``: whole, as a reference, or skipped, never
a stalled partition) before its offset counts as done. A broker that is down is
retried with backoff; the sidecar stays up and, after ``ready_grace_s``
without a broker connection or a stable group membership, reports not-ready.

Before a rebalance moves partitions, what is done of them is committed; once a
partition has left this replica its offsets are forgotten, and the records read
but not committed are counted as handed back: its next owner reads them again
(``collectors/kafka/commits.py``; docs, Kafka: "Rebalances").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import structlog
from kafka import KafkaConsumer, KafkaProducer
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError
from kafka.structs import TopicPartition
from prometheus_client import Gauge

from collectors.kafka.commits import Commits, RebalanceListener
from collectors.kafka.config import KafkaConfig
from collectors.kafka.dead_letter import DeadLetters
from collectors.kafka.group import consumer_settings, in_group
from collectors.kafka.offsets import OffsetTracker
from collectors.kafka.records import decode_logs_record, decode_trace_record
from collectors.otlp import export_decoding
from monitor.contract.events import parse_feedback, parse_labels
from monitor.contract.names import KAFKA_LAG_RECORDS
from monitor.contract.work_items import Consumer, Ticket, WorkItem
from monitor.contract.worker import Worker

log = structlog.get_logger("rag_monitor.kafka")

_POLL_TIMEOUT_MS = 100
# A full pipeline queue is waited on in slices this long, committing in between.
_SUBMIT_WAIT_S = 0.05
_MAX_BACKOFF_S = 30.0
# A dead-letter write may hold the consumer thread for a few attempts of up to 25 s;
# a stall is longer than that, and stop waits for it (the consumer is not safe to
# close under a running poll).
_STALL_S = 60.0
_STOP_TIMEOUT_S = 60.0
_NETWORK_CLIENT = KafkaConsumer.DEFAULT_CONFIG["kafka_client"]


class KafkaCollector:
    """Consumes the configured topics on its own thread."""

    port: int | None = None  # a client: it listens on no port
    max_connections = 0

    def __init__(
        self,
        config: KafkaConfig,
        pipeline: Consumer,
        consumer_factory: Callable[..., KafkaConsumer] = KafkaConsumer,
        producer_factory: Callable[..., KafkaProducer] = KafkaProducer,
    ) -> None:
        if config.bootstrap_servers is None:
            raise ValueError("collectors.kafka.bootstrap_servers is not set")
        consumer_settings(config)  # an invalid POD_NAME fails at start-up, not at connect
        self._config = config
        self._pipeline = pipeline
        self._consumer_factory = consumer_factory
        self._consumer: KafkaConsumer | None = None
        self._offsets = OffsetTracker()
        self._backoff = 1.0
        self._worker: Worker[None] = Worker(
            "kafka",
            step=self._step,
            tick_s=_POLL_TIMEOUT_MS / 1000,
            stop_timeout_s=_STOP_TIMEOUT_S,
            stall_after_s=_STALL_S,
            supervisor=pipeline.metrics.registry.supervisor,
        )
        self._dead_letters = (
            None
            if config.dead_letter_topic is None
            else DeadLetters(
                config,
                config.dead_letter_topic,
                producer_factory,
                pause=self._worker.pause,
                stopping=lambda: self._worker.stopping,
            )
        )
        self._in_group_at: float | None = None  # last seen in the group, broker reachable
        self._last_commit = self._last_lag = time.monotonic()
        self._lag_series: set[tuple[str, str]] = set()
        self._lag = Gauge(
            KAFKA_LAG_RECORDS,
            "Records of an assigned partition not yet processed and committed (high "
            "watermark - committed offset); each partition is reported by its owner only.",
            ["topic", "partition"],
            registry=pipeline.metrics.registry,
        )
        self._commits = Commits(self._offsets, pipeline.metrics.registry, self._forget_lag_of)

    def ready(self) -> bool:
        """Joined once, and in the group with a broker connection within ``ready_grace_s``."""
        seen = self._in_group_at
        return seen is not None and time.monotonic() - seen <= self._config.ready_grace_s

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
            self._commits.commit(consumer)
            consumer.close(autocommit=False)
            self._commits.release(set(self._offsets.partitions()), "stopped")
        if self._dead_letters is not None:
            self._dead_letters.close()
        self._in_group_at = None

    # --- consumer thread -------------------------------------------------------------

    def _step(self) -> None:
        """One turn of the consumer thread (the worker calls it until stopped)."""
        try:
            if self._consumer is None:
                self._consumer = self._connect()
                self._backoff = 1.0
            self._poll_once(self._consumer)
        except KafkaError as exc:
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
        self._commits.release(set(self._offsets.partitions()), "restarted")
        if consumer is not None:
            consumer.close(autocommit=False)

    def _connect(self) -> KafkaConsumer:
        topics = self._config.topics
        optional = (topics.labels, topics.feedback, topics.logs)
        subscribed = [*topics.traces, *(topic for topic in optional if topic)]
        # kafka-python 3 starts a network client (an IO thread and sockets) before
        # its first bootstrap and leaks it when that fails: close it ourselves, or
        # every retry while the broker is down costs a thread.
        started: list[Any] = []

        def network_client(**configs: Any) -> Any:
            started.append(_NETWORK_CLIENT(**configs))
            return started[-1]

        settings = consumer_settings(self._config)
        try:
            consumer = self._consumer_factory(kafka_client=network_client, **settings)
        except KafkaError:
            for client in started:
                client.close()
            raise
        consumer.subscribe(subscribed, listener=RebalanceListener(self._commits, consumer))
        log.info(
            "kafka_subscribed",
            topics=subscribed,
            group_id=self._config.group_id,
            group_instance_id=settings.get("group_instance_id"),
        )
        return consumer

    def _poll_once(self, consumer: KafkaConsumer) -> None:
        batches = consumer.poll(timeout_ms=_POLL_TIMEOUT_MS)
        # A rebalance within that poll may have moved partitions elsewhere; nothing of
        # theirs may be committed from here on.
        self._commits.release(set(self._offsets.partitions()) - consumer.assignment(), "revoked")
        for tp, records in batches.items():
            for record in records:
                if self._worker.stopping:
                    # Not handed over: rewind so a later poll or the next owner reads it again.
                    consumer.seek(tp, record.offset)
                    break
                self._handle(consumer, tp, record)
                self._maybe_commit(consumer)
        self._housekeeping(consumer)

    def _housekeeping(self, consumer: KafkaConsumer) -> None:
        """Between records and while waiting: membership, commit cadence, lag."""
        if in_group(consumer):
            self._in_group_at = time.monotonic()
        self._maybe_commit(consumer)
        if time.monotonic() - self._last_lag >= self._config.commit_interval_s:
            self._report_lag(consumer)

    def _maybe_commit(self, consumer: KafkaConsumer) -> None:
        # Whichever comes first bounds what a crash replays (docs, Kafka).
        if (
            self._offsets.done_since_commit >= self._config.commit_every_records
            or time.monotonic() - self._last_commit >= self._config.commit_interval_s
        ):
            self._last_commit = time.monotonic()
            # Out of the group a commit would wait for the coordinator; the offsets keep.
            if in_group(consumer):
                self._commits.commit(consumer)

    def _report_lag(self, consumer: KafkaConsumer) -> None:
        """Per assigned partition: high watermark minus the committed offset."""
        self._last_lag = time.monotonic()
        gauge = self._lag
        assigned = consumer.assignment()
        for tp in assigned:
            # The fetch high watermark, not end_offsets(): some brokers (Tansu) answer
            # ListOffsets "latest" with the last batch's base offset.
            highwater = consumer.highwater(tp)
            committed = self._offsets.committed_offset(tp)
            try:
                if committed is None and highwater is not None:
                    # Nothing read since the assignment: the position is the committed offset.
                    committed = consumer.position(tp, timeout_ms=0)
            except KafkaError:  # revoked meanwhile, or no position yet
                continue
            if highwater is not None and committed is not None:
                gauge.labels(tp.topic, str(tp.partition)).set(max(0, highwater - committed))
                self._lag_series.add((tp.topic, str(tp.partition)))
        self._forget_lag(self._lag_series - {(tp.topic, str(tp.partition)) for tp in assigned})

    def _forget_lag_of(self, partitions: set[TopicPartition]) -> None:
        self._forget_lag({(tp.topic, str(tp.partition)) for tp in partitions})

    def _forget_lag(self, series: set[tuple[str, str]]) -> None:
        """Drop the series of partitions this replica no longer owns (their owner reports them)."""
        for labels in series & self._lag_series:
            self._lag.remove(*labels)
        self._lag_series -= series

    def _handle(self, consumer: KafkaConsumer, tp: TopicPartition, record: ConsumerRecord) -> None:
        try:
            item = self._decode(record.topic, record.value or b"")
        except export_decoding.Refusal as refusal:  # invalid, or empty: the record is kept aside
            self._dead_letter(tp, record, str(refusal))
            return
        except Exception as exc:
            # A decoder bug must not end this thread (the sidecar would stay ready
            # and read nothing): the record waits in the dead-letter topic instead.
            log.warning("kafka_decoder_failed", error=type(exc).__name__, exc_info=True)
            self._dead_letter(tp, record, f"decoder failed: {type(exc).__name__}")
            return
        self._offsets.issue(tp, record.offset)
        ticket = Ticket(partial(self._offsets.done, tp, record.offset))
        item = replace(item, ticket=ticket)
        # A full queue is waited on in slices: commits and the membership check go on.
        while not self._pipeline.submit(item, timeout=_SUBMIT_WAIT_S):
            if self._worker.pause(0):
                return  # stopping: left uncommitted, read again after the restart
            self._housekeeping(consumer)

    def _decode(self, topic: str, value: bytes) -> WorkItem:
        """The record's work item (without its ticket), by the topic it came from."""
        topics = self._config.topics
        metrics = self._pipeline.metrics
        if topic == topics.labels:
            return export_decoding.events(value, parse_labels, "kafka")
        if topic == topics.feedback:
            return export_decoding.events(value, parse_feedback, "kafka")
        if topic == topics.logs:
            return decode_logs_record(value, metrics)
        return decode_trace_record(value, self._config.format, metrics)

    def _dead_letter(self, tp: TopicPartition, record: ConsumerRecord, reason: str) -> None:
        metrics = self._pipeline.metrics
        if self._dead_letters is None:
            metrics.count_record("kafka", "invalid")
        elif self._dead_letters.send(record, reason) == "skipped":
            metrics.count_record("kafka", "skipped")
        else:  # whole, or as a reference
            metrics.count_record("kafka", "dead_lettered")
        self._offsets.issue(tp, record.offset)
        self._offsets.done(tp, record.offset)
