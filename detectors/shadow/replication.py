"""The shadow pairs across replicas: halves meet at one replica, pairs reach every one.

Every replica publishes its halves (and their late signals) to ``halves_topic`` keyed by
pair id, so both halves of a pair land on one partition. The replicas read that topic in
one consumer group (``group_id``): the partition's owner joins the halves, records the
metrics, and publishes each outcome to ``pairs_topic``, which every replica reads whole
into its pair store (``monitor.contract.replication.WholeTopicReader``).

Offsets are committed automatically: a half held in memory when its partition moves to
another replica (a rebalance, a crash) does not meet its twin there, and both count as
unmatched (``timed_out``), never as a pair that was not seen.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
from kafka import KafkaConsumer

from detectors.shadow.metrics import ShadowMetrics
from detectors.shadow.model import message_from_record
from detectors.shadow.runner import JoinRunner
from monitor.contract.kafka_connection import KafkaConnection
from monitor.contract.replication import TopicReader, client_settings
from monitor.contract.sidecar_registry import SidecarRegistry

# kafka-python's default reconnect backoff grows to 30 s; a broker that came back should
# be noticed sooner (as the trace consumer does).
_CONSUMER_DEFAULTS = {"bootstrap_timeout_ms": 5000, "reconnect_backoff_max_ms": 5000}


class HalvesConsumer:
    """Reads ``halves_topic`` in the replicas' group and runs the join on the reader's thread."""

    def __init__(
        self,
        kafka: KafkaConnection,
        topic: str,
        group_id: str,
        *,
        runner: JoinRunner,
        metrics: ShadowMetrics,
        registry: SidecarRegistry,
        on_stop: Callable[[], None] = lambda: None,
    ) -> None:
        self._settings = {
            **_CONSUMER_DEFAULTS,
            **kafka.consumer,
            **client_settings(kafka),
            "group_id": group_id,
            "enable_auto_commit": True,
            "auto_offset_reset": "earliest",
        }
        self._topic = topic
        self._runner = runner
        self._metrics = metrics
        self._on_stop = on_stop
        self._reader = TopicReader(
            "shadow-join",
            self._subscribe,
            self._take,
            registry,
            after_poll=self._after_poll,
            before_close=self._settle_all,
        )

    def start(self) -> None:
        self._reader.start()

    def shutdown(self) -> None:
        self._reader.shutdown()

    def _subscribe(self) -> KafkaConsumer:
        consumer = KafkaConsumer(**self._settings)
        consumer.subscribe([self._topic])
        return consumer

    def _take(self, _topic: str, value: bytes) -> None:
        try:
            message = message_from_record(orjson.loads(value))
        except (ValueError, KeyError, TypeError):
            self._metrics.kafka.labels("halves", "consumed", "invalid").inc()
            return
        self._metrics.kafka.labels("halves", "consumed", "ok").inc()
        self._runner.take(message)

    def _after_poll(self, consumer: KafkaConsumer) -> None:
        self._metrics.partitions.set(len(consumer.assignment()))
        self._runner.expire()

    def _settle_all(self) -> None:
        """At the stop: settle what the join holds (halves as stopped), before leaving."""
        self._metrics.partitions.set(0)
        self._runner.drain()
        self._on_stop()
