"""The false-exclusion worked example end to end: real OTel SDK traffic and real Kafka records."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from detectors.filter_exclusion.detector import FilterExclusionDetector
from monitor.runtime.sidecar import Sidecar
from tests.conftest import (
    PROBES,
    assert_worked_example,
    golden_set_lines,
    sample,
    unique,
    wait_until,
    worked_example_records,
)
from tests.integration.conftest import post, probe_request
from tests.otel_traffic import emit_rag_request, tracer_for

pytestmark = pytest.mark.integration

StartSidecar = Callable[..., Sidecar]
JSON = "application/json"


def value_of(sidecar: Sidecar) -> Callable[..., float]:
    return lambda name, **labels: sample(sidecar.registry, name, **labels)


def filter_detector(sidecar: Sidecar) -> FilterExclusionDetector:
    found = [d for d in sidecar.pipeline._detectors if isinstance(d, FilterExclusionDetector)]
    assert len(found) == 1
    return found[0]


def scored(sidecar: Sidecar) -> float:
    value = value_of(sidecar)
    return value("rag_filter_eligible_queries_total") + value("rag_filter_no_eligible_gold_total")


# --- OTLP: the real opentelemetry-sdk exporter ------------------------------------------------


def emit_worked_example(sidecar: Sidecar) -> dict[str, str]:
    """Send the five probe replays and the leaking request; probe id (or "leak") -> trace id."""
    endpoint = f"http://127.0.0.1:{sidecar.http.port}/v1/traces"  # type: ignore[union-attr]
    provider, tracer = tracer_for(OTLPSpanExporter(endpoint=endpoint))
    base = time.time_ns()
    trace_ids = {
        probe.probe_id: emit_rag_request(tracer, probe_request(probe, base + i * 10**9))
        for i, probe in enumerate(PROBES)
    }
    trace_ids["leak"] = emit_rag_request(tracer, probe_request(None, base + 9 * 10**9))
    provider.shutdown()
    wait_until(lambda: sample(sidecar.registry, "rag_requests_total", source="otlp") == 6)
    return trace_ids


def test_worked_example_over_otlp_with_golden_set(
    start_sidecar: StartSidecar, tmp_path: Path
) -> None:
    """Probes replayed with rag.probe_id against the golden-set file reproduce the method's numbers."""
    golden = tmp_path / "golden.jsonl"
    golden.write_text(golden_set_lines())
    sidecar = start_sidecar(detectors={"filter_exclusion": {"golden_set": str(golden)}})
    emit_worked_example(sidecar)
    wait_until(lambda: scored(sidecar) == 5)
    assert_worked_example(value_of(sidecar))
    assert filter_detector(sidecar).status().false_exclusion_rate == 0.5


def test_worked_example_over_post_labels_before_and_after_traces(
    start_sidecar: StartSidecar,
) -> None:
    """Probe labels before the traces, trace labels after, each sent twice, and bad bodies refused."""
    sidecar = start_sidecar()
    early, late = PROBES[:2], PROBES[2:]
    bad_bodies = [
        b"{not json",
        b'{"probe_id": "q1"}',  # no gold
        b'{"trace_id": "ab", "probe_id": "q1", "gold_doc_ids": ["d1"]}',  # both keys
        b'{"trace_id": "ab", "gold_doc_ids": []}',
    ]
    for body in bad_bodies:
        assert post(sidecar, "/v1/labels", body, JSON)[0] == 400
    assert (
        sample(sidecar.registry, "rag_monitor_records_total", collector="otlp", outcome="invalid")
        == 4
    )
    early_labels = orjson.dumps([{"probe_id": p.probe_id, "gold_doc_ids": p.gold} for p in early])
    for _ in range(2):
        assert post(sidecar, "/v1/labels", early_labels, JSON)[:2] == (200, b'{"accepted":2}')
    assert filter_detector(sidecar).status().describe().startswith("no evidence")

    trace_ids = emit_worked_example(sidecar)
    wait_until(lambda: scored(sidecar) == 2)
    late_labels = orjson.dumps(
        [{"trace_id": trace_ids[p.probe_id], "gold_doc_ids": p.gold} for p in late]
    )
    for _ in range(2):
        assert post(sidecar, "/v1/labels", late_labels, JSON)[0] == 200
    wait_until(lambda: sample(sidecar.registry, "rag_filter_duplicate_labels_total") == 3)
    assert_worked_example(value_of(sidecar))
    assert sample(sidecar.registry, "rag_filter_join_pending", kind="traces") == 1  # the leak
    assert sample(sidecar.registry, "rag_monitor_events_total", type="label") == 2 * 2 + 2 * 3


# --- Kafka: rag-trace/1 records and the labels topic --------------------------------------------


@pytest.fixture
def producer(kafka_bootstrap: str) -> Iterator[KafkaProducer]:
    client = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=5)
    yield client
    client.close(timeout=5)


def send(producer: KafkaProducer, topic: str, values: list[Any]) -> None:
    for value in values:
        producer.send(topic, value=value if isinstance(value, bytes) else orjson.dumps(value))
    producer.flush()


def read_all(bootstrap: str, topic: str, expected: int) -> list[bytes]:
    consumer = KafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    values: list[bytes] = []
    try:

        def enough() -> bool:
            for batch in consumer.poll(timeout_ms=200).values():
                values.extend(record.value for record in batch)
            return len(values) >= expected

        wait_until(enough)
        return values
    finally:
        consumer.close()


def test_worked_example_over_kafka_records_and_labels_topic(
    kafka_bootstrap: str, producer: KafkaProducer, start_sidecar: StartSidecar
) -> None:
    """rag-trace/1 records plus labels on the labels topic, either order; a bad label is dead-lettered."""
    traces, labels, dlq = unique("traces"), unique("labels"), unique("dlq")
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(t, 1, 1) for t in (traces, labels, dlq)])
    admin.close()
    sidecar = start_sidecar(
        collectors={
            "kafka": {
                "bootstrap_servers": kafka_bootstrap,
                "group_id": unique("group"),
                "topics": {"traces": [traces], "labels": labels, "feedback": None},
                "format": "rag_trace_json",
                "dead_letter_topic": dlq,
                "consumer": {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000},
            }
        }
    )
    early, late = PROBES[:2], PROBES[2:]
    bad_label = b'{"trace_id": "ab", "gold_doc_ids": "d1"}'
    send(producer, labels, [{"probe_id": p.probe_id, "gold_doc_ids": p.gold} for p in early])
    send(producer, labels, [bad_label])
    records = worked_example_records()
    send(producer, traces, records)
    wait_until(lambda: sample(sidecar.registry, "rag_requests_total", source="kafka") == 6, 30)
    wait_until(lambda: scored(sidecar) == 2)
    by_probe = {r["probe_id"]: r["trace_id"] for r in records if "probe_id" in r}
    late_labels = [{"trace_id": by_probe[p.probe_id], "gold_doc_ids": p.gold} for p in late]
    send(producer, labels, late_labels + late_labels[:1])  # one redelivered
    wait_until(lambda: sample(sidecar.registry, "rag_filter_duplicate_labels_total") == 1)
    assert_worked_example(value_of(sidecar))
    assert (
        sample(
            sidecar.registry,
            "rag_monitor_records_total",
            collector="kafka",
            outcome="dead_lettered",
        )
        == 1
    )
    dead = read_all(kafka_bootstrap, dlq, 1)
    assert [json.loads(v) for v in dead] == [json.loads(bad_label)]
