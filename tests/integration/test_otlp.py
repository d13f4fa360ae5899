"""OTLP receivers against the real opentelemetry-sdk exporters, and the bad-input table."""

from __future__ import annotations

import gzip
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from monitor.runtime.sidecar import Sidecar
from tests.conftest import (
    REPO,
    json_body,
    json_span,
    many_documents,
    sample,
    sdk_request,
    to_otlp_json,
    wait_until,
)
from tests.integration.conftest import STAGES, post, requests_for
from tests.otel_traffic import MemoryExporter, RagRequest, emit_rag_request, tracer_for

pytestmark = pytest.mark.integration

StartSidecar = Callable[..., Sidecar]


def assert_counted_once_with_exact_sums(
    sidecar: Sidecar, sent: list[RagRequest], source: str
) -> None:
    registry = sidecar.registry
    wait_until(lambda: sample(registry, "rag_requests_total", source=source) >= len(sent))
    time.sleep(0.5)  # longer than grace_s: a double emission would show now
    assert sample(registry, "rag_requests_total", source=source) == len(sent)
    assert sample(registry, "rag_monitor_assembled_traces_total", outcome="complete") == len(sent)
    for stage in STAGES:
        expected = sum(getattr(r, f"{stage}_s") for r in sent)
        got = sample(registry, "rag_stage_latency_seconds_sum", stage=stage)
        assert got == pytest.approx(expected, rel=1e-9), stage
        assert sample(registry, "rag_stage_latency_seconds_count", stage=stage) == len(sent)


def test_http_exporter_traces_counted_once_with_children_from_a_second_exporter(
    start_sidecar: StartSidecar,
) -> None:
    """OTLP/HTTP from the SDK, half the children via another exporter: one request each, exact sums."""
    sidecar = start_sidecar()
    endpoint = f"http://127.0.0.1:{sidecar.http.port}/v1/traces"  # type: ignore[union-attr]
    _, tracer = tracer_for(HttpExporter(endpoint=endpoint))
    _, children = tracer_for(
        HttpExporter(endpoint=endpoint, compression=Compression.Gzip), "worker"
    )
    sent = requests_for(20)
    for i, request in enumerate(sent):
        emit_rag_request(tracer, request, child_tracer=children if i % 2 else None)
    assert_counted_once_with_exact_sums(sidecar, sent, "otlp")
    assert (
        sample(sidecar.registry, "rag_monitor_records_total", collector="otlp", outcome="ok")
        == 20 * 5
    )


def test_grpc_exporter_traces_counted_once_with_children_from_a_second_exporter(
    start_sidecar: StartSidecar,
) -> None:
    """OTLP/gRPC from the SDK, half the children via another exporter: one request each, exact sums."""
    sidecar = start_sidecar()
    endpoint = f"127.0.0.1:{sidecar.grpc.port}"  # type: ignore[union-attr]
    _, tracer = tracer_for(GrpcExporter(endpoint=endpoint, insecure=True))
    _, children = tracer_for(GrpcExporter(endpoint=endpoint, insecure=True), "worker")
    sent = requests_for(12)
    for i, request in enumerate(sent):
        emit_rag_request(tracer, request, child_tracer=children if i % 2 else None)
    assert_counted_once_with_exact_sums(sidecar, sent, "otlp")


def test_otlp_json_is_accepted(start_sidecar: StartSidecar) -> None:
    """An OTLP/JSON body (hex ids, int64 strings) is decoded and counted."""
    sidecar = start_sidecar()
    status, body, _ = post(sidecar, "/v1/traces", to_otlp_json(sdk_request()), "application/json")
    assert (status, body) == (200, b"{}")
    wait_until(lambda: sample(sidecar.registry, "rag_requests_total", source="otlp") == 1)


PROTO = "application/x-protobuf"
JSON = "application/json"
LIMIT = 2_000_000


def bad_inputs() -> list[tuple[str, bytes, str, dict[str, str], int]]:
    valid = sdk_request()
    marker = b"what is the refund policy?"
    return [
        ("garbage", b"\x00\xffgarbage\x13\x37", PROTO, {}, 400),
        ("truncated-protobuf", valid[: len(valid) - 7], PROTO, {}, 400),
        ("invalid-utf8-protobuf", valid.replace(marker, b"\xff" * len(marker)), PROTO, {}, 400),
        ("invalid-utf8-json", b'{"resourceSpans": "\xff\xfe"}', JSON, {}, 400),
        ("wrong-json-types", b'{"resourceSpans": [{"scopeSpans": {"spans": 1}}]}', JSON, {}, 400),
        ("nan-duration", json_body(json_span(attributes=[{"key": "llm.time_to_first_token", "value": {"doubleValue": "NaN"}}])), JSON, {}, 400),
        ("negative-duration", json_body(json_span(endTimeUnixNano="5")), JSON, {}, 400),
        ("10k-documents", json_body(json_span(attributes=many_documents(10_000))), JSON, {}, 400),
        ("oversize", b"\x0a" * (LIMIT + 1), PROTO, {}, 413),
        ("gzip-bomb", gzip.compress(b"\x00" * (LIMIT * 20)), PROTO, {"Content-Encoding": "gzip"}, 413),
        ("bad-gzip", b"\x1f\x8bnot gzip at all", PROTO, {"Content-Encoding": "gzip"}, 400),
        ("unknown-encoding", valid, PROTO, {"Content-Encoding": "br"}, 415),
        ("wrong-content-type", valid, "text/plain", {}, 415),
    ]  # fmt: skip


def test_bad_input_table_gets_4xx_is_counted_and_the_sidecar_still_serves(
    start_sidecar: StartSidecar,
) -> None:
    """Every bad body is refused with its 4xx and counted as invalid; valid traffic still flows."""
    sidecar = start_sidecar(collectors={"otlp": {"max_request_bytes": LIMIT}})
    cases = bad_inputs()
    for name, body, content_type, headers, expected in cases:
        status, answer, answer_headers = post(sidecar, "/v1/traces", body, content_type, headers)
        assert status == expected, name
        if answer_headers.get("Content-Type") == PROTO:
            assert Status.FromString(answer).message, name
        else:
            assert orjson.loads(answer)["message"], name
    invalid = sample(
        sidecar.registry, "rag_monitor_records_total", collector="otlp", outcome="invalid"
    )
    assert invalid == len(cases)
    assert post(sidecar, "/v1/traces", sdk_request(), PROTO)[0] == 200
    wait_until(lambda: sample(sidecar.registry, "rag_requests_total", source="otlp") == 1)


def test_partial_success_reports_rejected_spans(start_sidecar: StartSidecar) -> None:
    """A request with one bad and one good span is accepted with partial_success.rejected_spans 1."""
    sidecar = start_sidecar()
    body = json_body(json_span(endTimeUnixNano="1"), json_span(spanId="aaaaaaaaaaaaaaaa"))
    status, answer, _ = post(sidecar, "/v1/traces", body, JSON)
    assert status == 200
    assert orjson.loads(answer)["partialSuccess"]["rejectedSpans"] == "1"
    assert sample(sidecar.registry, "rag_monitor_rejected_spans_total", collector="otlp") == 1


def test_bearer_token_is_required_once_configured(
    start_sidecar: StartSidecar, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With auth_token_env set, HTTP answers 401 and gRPC UNAUTHENTICATED without the token."""
    monkeypatch.setenv("RAG_MONITOR_TEST_TOKEN", "s3cret")
    sidecar = start_sidecar(service={"auth_token_env": "RAG_MONITOR_TEST_TOKEN"})
    status, _, headers = post(sidecar, "/v1/traces", sdk_request(), PROTO)
    assert status == 401
    assert headers["WWW-Authenticate"] == "Bearer"
    wrong = {"Authorization": "Bearer nope"}
    assert post(sidecar, "/v1/traces", sdk_request(), PROTO, wrong)[0] == 401
    good = {"Authorization": "Bearer s3cret"}
    assert post(sidecar, "/v1/traces", sdk_request(), PROTO, good)[0] == 200

    spans = MemoryExporter()
    _, tracer = tracer_for(spans)
    emit_rag_request(tracer, RagRequest(start_ns=time.time_ns()))
    endpoint = f"127.0.0.1:{sidecar.grpc.port}"  # type: ignore[union-attr]
    anonymous = GrpcExporter(endpoint=endpoint, insecure=True, timeout=5)
    assert anonymous.export(spans.spans) == SpanExportResult.FAILURE
    authorized = GrpcExporter(
        endpoint=endpoint, insecure=True, headers={"authorization": "Bearer s3cret"}
    )
    assert authorized.export(spans.spans) == SpanExportResult.SUCCESS
    wait_until(lambda: sample(sidecar.registry, "rag_requests_total", source="otlp") == 2)


def test_grpc_refuses_a_request_whose_spans_are_all_invalid(start_sidecar: StartSidecar) -> None:
    """Over gRPC, a request of only invalid spans fails and is counted as invalid."""
    import grpc
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

    sidecar = start_sidecar()
    spans = MemoryExporter()
    _, tracer = tracer_for(spans)
    emit_rag_request(tracer, RagRequest(start_ns=time.time_ns()))
    request = encode_spans(spans.spans)
    for span in request.resource_spans[0].scope_spans[0].spans:
        span.end_time_unix_nano = 1
    address = f"127.0.0.1:{sidecar.grpc.port}"  # type: ignore[union-attr]
    with grpc.insecure_channel(address) as channel, pytest.raises(grpc.RpcError) as caught:
        TraceServiceStub(channel).Export(request, timeout=5)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (
        sample(sidecar.registry, "rag_monitor_records_total", collector="otlp", outcome="invalid")
        == 1
    )
    assert sample(sidecar.registry, "rag_monitor_rejected_spans_total", collector="otlp") == 5


def test_grpc_answers_empty_and_partial_exports_of_both_services(
    start_sidecar: StartSidecar,
) -> None:
    """Over gRPC, an empty export of either service is OK with an empty response and
    counted ok; a trace export with one bad span of six is OK, its response's
    partial_success naming the one."""
    import grpc
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
        ExportLogsServiceRequest,
        ExportLogsServiceResponse,
    )
    from opentelemetry.proto.collector.logs.v1.logs_service_pb2_grpc import LogsServiceStub
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub

    sidecar = start_sidecar()
    spans = MemoryExporter()
    _, tracer = tracer_for(spans)
    emit_rag_request(tracer, RagRequest(start_ns=time.time_ns()))
    partial = encode_spans(spans.spans)
    partial.resource_spans[0].scope_spans[0].spans[0].end_time_unix_nano = 1
    address = f"127.0.0.1:{sidecar.grpc.port}"  # type: ignore[union-attr]
    with grpc.insecure_channel(address) as channel:
        traces, logs = TraceServiceStub(channel), LogsServiceStub(channel)
        empty_traces = traces.Export(ExportTraceServiceRequest(), timeout=5)
        empty_logs = logs.Export(ExportLogsServiceRequest(), timeout=5)
        answer = traces.Export(partial, timeout=5)
    assert empty_traces == ExportTraceServiceResponse()
    assert empty_logs == ExportLogsServiceResponse()
    assert answer.partial_success.rejected_spans == 1
    assert answer.partial_success.error_message

    # The two empty exports at once, the partial one once the pipeline has processed it.
    def ok_records() -> float:
        return sample(sidecar.registry, "rag_monitor_records_total", collector="otlp", outcome="ok")

    wait_until(lambda: ok_records() == 3)
    time.sleep(0.5)  # nothing counted twice
    assert ok_records() == 3
    assert sample(sidecar.registry, "rag_monitor_rejected_spans_total", collector="otlp") == 1


def test_protobuf_answer_is_an_export_response(start_sidecar: StartSidecar) -> None:
    """A protobuf export is answered with an ExportTraceServiceResponse in protobuf."""
    sidecar = start_sidecar()
    status, answer, headers = post(sidecar, "/v1/traces", sdk_request(), PROTO)
    assert status == 200
    assert headers["Content-Type"] == PROTO
    assert not ExportTraceServiceResponse.FromString(answer).HasField("partial_success")


def test_labels_and_feedback_become_counted_events(start_sidecar: StartSidecar) -> None:
    """POST /v1/labels and /v1/feedback hand events to the pipeline; malformed ones get 400."""
    sidecar = start_sidecar()
    labels = (
        b'[{"probe_id": "q1", "gold_doc_ids": ["d1"]}, {"trace_id": "ab", "gold_doc_ids": ["d2"]}]'
    )
    assert post(sidecar, "/v1/labels", labels, JSON)[:2] == (200, b'{"accepted":2}')
    feedback = b'{"trace_id": "ab", "kind": "thumbs_down", "reason": "wrong"}'
    assert post(sidecar, "/v1/feedback", feedback, JSON)[0] == 200
    assert post(sidecar, "/v1/feedback", b'{"trace_id": "ab", "kind": "meh"}', JSON)[0] == 400
    assert post(sidecar, "/v1/labels", b'{"gold_doc_ids": ["d1"]}', JSON)[0] == 400
    assert post(sidecar, "/v1/labels", labels, "text/csv")[0] == 415
    registry = sidecar.registry
    wait_until(lambda: sample(registry, "rag_monitor_events_total", type="label") == 2)
    wait_until(lambda: sample(registry, "rag_monitor_events_total", type="feedback") == 1)
    assert sample(registry, "rag_monitor_records_total", collector="otlp", outcome="invalid") == 3


def test_metrics_health_and_readiness_endpoints(start_sidecar: StartSidecar) -> None:
    """/metrics is Prometheus text, /healthz and /readyz answer 200 once the receivers listen."""
    sidecar = start_sidecar()
    base = f"http://127.0.0.1:{sidecar.metrics_server.port}"
    with urllib.request.urlopen(f"{base}/metrics") as response:
        text = response.read().decode()
    assert "# TYPE rag_stage_latency_seconds histogram" in text
    assert 'rag_monitor_queue_depth{queue="ingest"}' in text
    assert 'rag_monitor_worker_up{worker="pipeline"} 1.0' in text
    with urllib.request.urlopen(f"{base}/readyz") as response:
        assert orjson.loads(response.read()) == {
            "ready": True, "checks": {"pipeline": True, "otlp_http": True, "otlp_grpc": True},
        }  # fmt: skip
    with urllib.request.urlopen(f"{base}/healthz") as response:
        assert response.status == 200


def scrape_default() -> str:
    with urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=5) as response:
        return str(response.read().decode())


def _ports_free(*ports: int) -> bool:
    for port in ports:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return False
    return True


def test_run_without_config_uses_default_ports_and_sigterm_drains(tmp_path: Path) -> None:
    """`rag-monitor run` with no config listens on 4318/4317, serves :9464, counts, exits 0 on SIGTERM."""
    if not _ports_free(4318, 4317, 9464):
        pytest.skip("a default port is in use on this machine")
    environment = {k: v for k, v in os.environ.items() if not k.startswith("RAG_MONITOR_")}
    log = (tmp_path / "run.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "monitor", "run"], cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT,
        env={**environment, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    try:

        def ready() -> bool:
            try:
                with urllib.request.urlopen("http://127.0.0.1:9464/readyz", timeout=2) as r:
                    return r.status == 200
            except OSError:
                return False

        wait_until(ready, timeout=60, every=0.2)
        _, http_tracer = tracer_for(HttpExporter(endpoint="http://127.0.0.1:4318/v1/traces"))
        _, grpc_tracer = tracer_for(GrpcExporter(endpoint="127.0.0.1:4317", insecure=True))
        for tracer in (http_tracer, grpc_tracer):
            emit_rag_request(tracer, RagRequest(start_ns=time.time_ns()))
        served = 'rag_requests_total{source="otlp",variant="production"} 2.0'
        wait_until(lambda: served in scrape_default(), timeout=30)
        for tracer in (http_tracer, grpc_tracer):
            emit_rag_request(tracer, RagRequest(start_ns=time.time_ns()))
        # The default grace period is 2 s; SIGTERM before it ends must still emit both.
        process.terminate()
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
        log.close()
    lines = [
        orjson.loads(line)
        for line in (tmp_path / "run.log").read_bytes().splitlines()
        if line.startswith(b"{")
    ]
    drained = next(line for line in lines if line["event"] == "pipeline_drained")
    assert drained["pending_traces_emitted"] == 2
    assert [line["event"] for line in lines][-1] == "stopped"
