"""Dead letters: where a Kafka record that cannot be decoded goes, so that it never stalls
its partition.

The record goes to the dead-letter topic whole, with the reason and its origin in
headers. One that cannot go whole (over the producer's or the broker's size limit,
or the topic stayed unavailable for ``dead_letter_tries`` attempts) goes as a
reference: a small JSON document naming topic, partition, offset, size, reason and
timestamp. One that cannot go even so is skipped. Either way its offset counts as
done and the partition moves on; the outcome is counted, and each kind of failure
is logged once (the counters carry the numbers, the references the offsets).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Literal

import orjson
import structlog
from kafka import KafkaProducer
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import KafkaError, MessageSizeTooLargeError, RecordListTooLargeError

from collectors.kafka.config import KafkaConfig

log = structlog.get_logger("rag_monitor.kafka")

REASON_HEADER = "rag-monitor-reason"
SOURCE_TOPIC_HEADER = "rag-monitor-source-topic"
SOURCE_PARTITION_HEADER = "rag-monitor-source-partition"
SOURCE_OFFSET_HEADER = "rag-monitor-source-offset"
REFERENCE_HEADER = "rag-monitor-reference"

# Over a size limit: no retry makes it fit.
_TOO_LARGE = (MessageSizeTooLargeError, RecordListTooLargeError)
# One attempt waits at most this long for its acknowledgement (the producer gives up
# after its delivery_timeout_ms), and up to max_block_ms before: 21 s. Pauses between
# attempts keep the heartbeat fresh, so the consumer thread never counts as stalled.
_SEND_TIMEOUT_S = 16.0
_MAX_BACKOFF_S = 8.0

Delivery = Literal["whole", "reference", "skipped"]


def producer_settings(config: KafkaConfig) -> dict[str, Any]:
    """The dead-letter producer's kafka-python settings: no consumer tuning, only ``security``.

    kafka-python waits 30 s to bootstrap, 60 s for the metadata of a topic it cannot
    reach and retries a send for 120 s; a dead letter is retried by the collector
    instead, a bounded number of times, so that one attempt stays short.
    """
    return {
        "bootstrap_servers": config.bootstrap_servers,
        "acks": "all",
        "bootstrap_timeout_ms": 5000,
        "max_block_ms": 5000,
        "request_timeout_ms": 10_000,
        "delivery_timeout_ms": 15_000,
        **config.security,
    }


def reference(record: ConsumerRecord, reason: str) -> bytes:
    """The JSON that stands for a record that could not be dead-lettered whole."""
    return orjson.dumps(
        {
            "topic": record.topic,
            "partition": record.partition,
            "offset": record.offset,
            "size": len(record.value or b""),
            "key_size": len(record.key or b""),
            "reason": reason,
            "timestamp": record.timestamp,
        }
    )


def origin_headers(record: ConsumerRecord, reason: str) -> list[tuple[str, bytes]]:
    return [
        (REASON_HEADER, reason.encode()),
        (SOURCE_TOPIC_HEADER, record.topic.encode()),
        (SOURCE_PARTITION_HEADER, str(record.partition).encode()),
        (SOURCE_OFFSET_HEADER, str(record.offset).encode()),
    ]


class DeadLetters:
    """Writes dead letters for the consumer thread; ``send`` always returns."""

    def __init__(
        self,
        config: KafkaConfig,
        topic: str,
        producer_factory: Callable[..., KafkaProducer],
        pause: Callable[[float], bool],
        stopping: Callable[[], bool],
    ) -> None:
        self._config = config
        self._topic = topic
        self._producer_factory = producer_factory
        self._producer: KafkaProducer | None = None
        self._pause = pause
        self._stopping = stopping
        # After a record was skipped the topic is taken as down: one attempt each
        # until a write succeeds, so that a run of bad records does not crawl.
        self._down = False
        self._logged: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def send(self, record: ConsumerRecord, reason: str) -> Delivery:
        """Dead-letter ``record`` whole, else as a reference, else skip it.

        Raises ``KafkaError`` only when the collector is stopping: the record is
        then left uncommitted and read again after the restart.
        """
        was_down = self._down
        headers = [*(record.headers or []), *origin_headers(record, reason)]
        tries = 1 if was_down else self._config.dead_letter_tries
        failure = self._deliver(record.value, record.key, headers, tries)
        if failure is None:
            self._down = False
            return "whole"
        # Too large: the topic works, the reference gets every attempt. Unavailable
        # for every attempt: one more, small, tells whether it is the size after all.
        too_large = isinstance(failure, _TOO_LARGE)
        if too_large or not was_down:
            why = f"{reason}; not dead-lettered whole: {type(failure).__name__}"
            marked = [*origin_headers(record, why), (REFERENCE_HEADER, b"1")]
            tries = self._config.dead_letter_tries if too_large else 1
            second = self._deliver(reference(record, why), None, marked, tries)
            if second is None:
                self._down = False
                self._log_once("dead_letter_reference", failure, record)
                return "reference"
            failure = second
        self._down = True
        self._log_once("kafka_record_skipped", failure, record)
        return "skipped"

    def close(self) -> None:
        with self._lock:
            producer, self._producer = self._producer, None
        if producer is not None:
            producer.close(timeout=5)

    def _deliver(
        self, value: bytes | None, key: bytes | None, headers: list[tuple[str, bytes]], tries: int
    ) -> Exception | None:
        """None once the broker acknowledged the record; else the last failure."""
        failure: Exception | None = None
        backoff = 1.0
        for attempt in range(tries):
            if attempt:
                self._pause(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
            try:
                future = self._producer_or_new().send(
                    self._topic, value=value, key=key, headers=headers
                )
                future.get(timeout=_SEND_TIMEOUT_S)
                return None
            except _TOO_LARGE as exc:
                failure = exc
                break
            except KafkaError as exc:
                if self._stopping():
                    raise
                failure = exc
            except Exception as exc:  # a bug or a refused argument: retrying will not help
                failure = exc
                break
        return failure

    def _producer_or_new(self) -> KafkaProducer:
        with self._lock:
            if self._producer is None:
                self._producer = self._producer_factory(**producer_settings(self._config))
            return self._producer

    def _log_once(self, event: str, failure: Exception, record: ConsumerRecord) -> None:
        kind = (event, type(failure).__name__)
        if kind in self._logged:
            return
        self._logged.add(kind)
        log.warning(
            event,
            error=type(failure).__name__,
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            size=len(record.value or b""),
            note="logged once per kind; rag_monitor_records_total counts every one",
        )
