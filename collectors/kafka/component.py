"""The Kafka collector's registration (entry point ``kafka`` in ``rag_monitor.collectors``):
its config section ``collectors.kafka`` and its consumer, built when brokers are set.
kafka-python is imported only when the component builds (it is slow to import)."""

from __future__ import annotations

from collectors.kafka.config import KafkaConfig
from monitor.contract.components import CollectorComponent, CollectorContext, Receiver


def _kafka(kafka: KafkaConfig, context: CollectorContext) -> Receiver | None:
    if kafka.bootstrap_servers is None:
        return None
    from collectors.kafka.collector import KafkaCollector

    return KafkaCollector(kafka, context.consumer)


KAFKA = CollectorComponent(
    name="kafka", config_model=KafkaConfig, description="Kafka consumer", build=_kafka, order=30
)
