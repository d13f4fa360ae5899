"""The OTLP/HTTP receiver against a sink consumer: answers, counts and what it submits."""

from __future__ import annotations

import gzip
import http.client
import json
from collections.abc import Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from prometheus_client import CollectorRegistry

from collectors.otlp_http import OtlpHttpReceiver
from monitor.config import OtlpConfig
from monitor.pipeline import Events, PipelineMetrics, SpanBatch, WorkItem
from monitor.trace import Feedback, Label
from tests.conftest import sample

TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")


class SinkConsumer:
    """Takes what a collector submits; ``accept=False`` plays a full queue."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.metrics = PipelineMetrics(registry)
        self.items: list[WorkItem] = []
        self.accept = True

    def submit(self, item: WorkItem, timeout: float | None = None) -> bool:
        if self.accept:
            self.items.append(item)
        return self.accept


Running = tuple[OtlpHttpReceiver, SinkConsumer, CollectorRegistry]


@pytest.fixture
def receiver() -> Iterator[Running]:
    registry = CollectorRegistry()
    sink = SinkConsumer(registry)
    service = OtlpHttpReceiver(OtlpConfig.model_validate({"http": {"port": 0}}), sink)
    service.start()
    try:
        yield service, sink, registry
    finally:
        service.shutdown()


def post(
    service: OtlpHttpReceiver, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=5)
    try:
        connection.request("POST", path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def export_request(span_ids: list[bytes], bad_span: bool = False) -> bytes:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for span_id in span_ids:
        span = scope.spans.add(trace_id=TRACE, span_id=span_id, name="s")
        span.start_time_unix_nano, span.end_time_unix_nano = 1_000, 2_000
    if bad_span:
        scope.spans.add(trace_id=TRACE, span_id=b"\0" * 8, name="zero id")
    return request.SerializeToString()


def test_protobuf_export_submits_the_valid_spans_and_reports_the_rest(receiver: Running) -> None:
    """Valid spans go to the consumer in one batch; a refused span is partial success."""
    service, sink, registry = receiver
    body = gzip.compress(export_request([b"\1" * 8, b"\2" * 8], bad_span=True))
    status, _, raw = post(service, "/v1/traces", body, {
        "Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"})  # fmt: skip
    assert status == 200
    response = ExportTraceServiceResponse.FromString(raw)
    assert response.partial_success.rejected_spans == 1
    [batch] = sink.items
    assert isinstance(batch, SpanBatch)
    assert [span.span_id for span in batch.spans] == ["01" * 8, "02" * 8]
    assert sample(registry, "rag_monitor_rejected_spans_total", collector="otlp") == 1


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"\xff\x00 not protobuf", "application/x-protobuf", 400),
        (b"{not json", "application/json", 400),
        (b"anything", "text/plain", 415),
    ],
    ids=["bad-protobuf", "bad-json", "other-media-type"],
)
def test_a_bad_body_is_refused_counted_and_not_submitted(
    receiver, body: bytes, content_type: str, status: int
) -> None:  # type: ignore[no-untyped-def]
    """Undecodable bodies and other media types get a 4xx and count as invalid records."""
    service, sink, registry = receiver
    assert post(service, "/v1/traces", body, {"Content-Type": content_type})[0] == status
    assert sink.items == []
    assert sample(registry, "rag_monitor_records_total", collector="otlp", outcome="invalid") == 1


def test_a_full_consumer_answers_503_with_retry_after(receiver: Running) -> None:
    """When the consumer cannot take the batch the client is told to retry, nothing counted."""
    service, sink, registry = receiver
    sink.accept = False
    status, headers, _ = post(service, "/v1/traces", export_request([b"\1" * 8]),
                              {"Content-Type": "application/x-protobuf"})  # fmt: skip
    assert (status, headers.get("Retry-After")) == (503, "1")
    assert sample(registry, "rag_monitor_records_total", collector="otlp", outcome="invalid") == 0


def test_labels_and_feedback_are_submitted_as_events(receiver: Running) -> None:
    """POST /v1/labels and /v1/feedback turn JSON records into label and feedback events."""
    service, sink, _ = receiver
    label = json.dumps([{"trace_id": "t1", "gold_doc_ids": ["d1"]}]).encode()
    feedback = json.dumps({"trace_id": "t1", "kind": "thumbs_down"}).encode()
    assert post(service, "/v1/labels", label, {"Content-Type": "application/json"})[0] == 200
    assert post(service, "/v1/feedback", feedback, {"Content-Type": "application/json"})[0] == 200
    labels, feedbacks = sink.items
    assert isinstance(labels, Events)
    assert isinstance(feedbacks, Events)
    assert list(labels.events) == [Label(gold_doc_ids=("d1",), trace_id="t1")]
    assert list(feedbacks.events) == [Feedback(trace_id="t1", kind="thumbs_down")]
