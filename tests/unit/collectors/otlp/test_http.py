"""The OTLP/HTTP receiver against a sink consumer: answers, counts and what it submits;
its transport's bounds and its stop."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from collectors.otlp.config import OtlpConfig
from collectors.otlp.http import PROTOBUF, OtlpHttpReceiver
from monitor.contract.components import write_token
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Feedback, Label
from monitor.contract.work_items import Events, SpanBatch, WorkItem
from tests.conftest import sample, wait_until

TRACE = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")


class SinkConsumer:
    """Takes what a collector submits; ``accept=False`` plays a full queue."""

    def __init__(self, registry: SidecarRegistry) -> None:
        self.metrics = PipelineMetrics(registry)
        self.items: list[WorkItem] = []
        self.accept = True

    def submit(self, item: WorkItem, timeout: float | None = None) -> bool:
        if self.accept:
            self.items.append(item)
        return self.accept


Running = tuple[OtlpHttpReceiver, SinkConsumer, SidecarRegistry]


@pytest.fixture
def receiver() -> Iterator[Running]:
    registry = SidecarRegistry()
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


# --- the transport: bounds and the stop (monitor/contract/http/service.py) ------------------------


def start_receiver(sink: SinkConsumer, **http: object) -> OtlpHttpReceiver:
    config = OtlpConfig.model_validate({"http": {"port": 0, **http}})
    service = OtlpHttpReceiver(config, sink)
    service.start()
    return service


Bounded = Callable[..., tuple[OtlpHttpReceiver, SinkConsumer]]


@pytest.fixture
def bounded() -> Iterator[Bounded]:
    """Start receivers with the given ``collectors.otlp.http`` bounds; all shut down after."""
    started: list[OtlpHttpReceiver] = []

    def start(**http: object) -> tuple[OtlpHttpReceiver, SinkConsumer]:
        sink = SinkConsumer(SidecarRegistry())
        started.append(start_receiver(sink, **http))
        return started[-1], sink

    yield start
    for service in started:
        service.shutdown()


def connect(service: OtlpHttpReceiver) -> socket.socket:
    return socket.create_connection(("127.0.0.1", service.port), timeout=5)


def export_head(length: int, extra: str = "") -> bytes:
    return (
        f"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        f"Content-Length: {length}\r\n{extra}\r\n"
    ).encode()


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    response = http.client.HTTPResponse(sock)
    response.begin()
    return response.status, dict(response.getheaders()), response.read()


def closed_by_server(sock: socket.socket) -> bool:
    """True when the server closed ``sock`` (EOF or reset), False when it is still open."""
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def connections(service: OtlpHttpReceiver) -> float:
    registry = service.pipeline.metrics.registry
    return sample(registry, "rag_monitor_http_connections", server="otlp_http")


def refused(service: OtlpHttpReceiver, reason: str) -> float:
    registry = service.pipeline.metrics.registry
    return sample(registry, "rag_monitor_http_refused_total", server="otlp_http", reason=reason)


def test_one_keep_alive_connection_serves_several_requests(receiver: Running) -> None:
    """Requests follow one another on one connection; each is answered and submitted."""
    service, sink, _ = receiver
    connection = http.client.HTTPConnection("127.0.0.1", service.port, timeout=5)
    body = export_request([b"\1" * 8])
    for _ in range(3):
        connection.request("POST", "/v1/traces", body, {"Content-Type": PROTOBUF})
        response = connection.getresponse()
        response.read()
        assert response.status == 200
    connection.close()
    assert len(sink.items) == 3


def test_a_body_without_content_length_is_refused_411_and_the_connection_closed(
    receiver: Running,
) -> None:
    """A chunked body cannot be framed: 411, counted invalid, and the server hangs up."""
    service, sink, registry = receiver
    sock = connect(service)
    sock.sendall(
        b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    )
    status, headers, _ = read_response(sock)
    assert (status, headers.get("Connection")) == (411, "close")
    assert closed_by_server(sock)
    assert sink.items == []
    assert sample(registry, "rag_monitor_records_total", collector="otlp", outcome="invalid") == 1


def test_at_max_connections_the_longest_idle_connection_makes_room(bounded: Bounded) -> None:
    """With the bound reached by idle connections, a new one closes the oldest idle one
    and is served; the others stay open."""
    service, _ = bounded(max_connections=2)
    oldest, newer = connect(service), connect(service)
    wait_until(lambda: connections(service) == 2, timeout=5)
    client = http.client.HTTPConnection("127.0.0.1", service.port, timeout=5)
    client.request("POST", "/v1/traces", export_request([b"\1" * 8]), {"Content-Type": PROTOBUF})
    assert client.getresponse().status == 200
    assert closed_by_server(oldest)
    newer.settimeout(0.2)
    assert not closed_by_server(newer)
    assert refused(service, "idle_evicted") == 1


def test_at_max_connections_with_none_idle_the_new_connection_is_refused(bounded: Bounded) -> None:
    """A connection in the middle of a request is not idle: a new one gets 503 and is closed."""
    service, _ = bounded(max_connections=1)
    busy = connect(service)
    busy.sendall(b"POST /v1/tra")  # a request begun, not finished
    wait_until(lambda: connections(service) == 1, timeout=5)
    time.sleep(0.2)  # its first bytes are read: it is no longer idle
    late = connect(service)
    status, headers, _ = read_response(late)
    assert (status, headers.get("Retry-After"), headers.get("Connection")) == (503, "1", "close")
    assert refused(service, "max_connections") == 1
    busy.settimeout(0.2)
    assert not closed_by_server(busy)


@pytest.mark.parametrize(
    ("http_bounds", "send", "status", "reason"),
    [
        ({"header_timeout_s": 0.3}, b"POST /v1/traces HTTP/1.1\r\nHost:", 408, "header_timeout"),
        ({"body_timeout_s": 0.3}, export_head(1000) + b"only part", 408, "body_timeout"),
        ({"max_header_bytes": 1024}, export_head(1, "X-Big: " + "a" * 2000 + "\r\n"), 431,
         "header_too_large"),
        ({}, b"GARBAGE\r\n\r\n", 400, "bad_request"),
        ({}, "POST /v1/traces HTTP/1.1\r\nContent-Length: \u00b2\r\n\r\n".encode("latin-1"),
         400, "bad_request"),
    ],
    ids=["slow-head", "slow-body", "large-head", "malformed", "superscript-length"],
)  # fmt: skip
def test_a_slow_large_or_malformed_request_is_answered_counted_and_closed(
    bounded: Bounded, http_bounds: dict[str, float], send: bytes, status: int, reason: str
) -> None:
    """The server itself ends such a request with its status, closes, and counts the reason."""
    service, sink = bounded(**http_bounds)
    sock = connect(service)
    sock.sendall(send)
    answer, headers, _ = read_response(sock)
    assert (answer, headers.get("Connection")) == (status, "close")
    assert closed_by_server(sock)
    assert refused(service, reason) == 1
    assert sink.items == []


def test_an_idle_keep_alive_connection_is_closed_after_idle_timeout(bounded: Bounded) -> None:
    """A connection that sends nothing is closed once idle_timeout_s has passed."""
    service, _ = bounded(idle_timeout_s=0.3)
    sock = connect(service)
    assert closed_by_server(sock)
    assert refused(service, "idle_timeout") == 1


def test_expect_100_continue_is_answered_before_the_body(receiver: Running) -> None:
    """A client that waits for 100 Continue (curl does over 1 MB) gets it, then its answer."""
    service, sink, _ = receiver
    body = export_request([b"\1" * 8])
    sock = connect(service)
    sock.sendall(export_head(len(body), "Expect: 100-continue\r\n"))
    assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue\r\n\r\n")
    sock.sendall(body)
    assert read_response(sock)[0] == 200
    assert len(sink.items) == 1


def test_stop_intake_refuses_new_work_and_closes_idle_connections(bounded: Bounded) -> None:
    """After stop_intake a request on an open connection gets 503 + Retry-After +
    Connection: close and is not submitted; idle connections are closed; the port is shut."""
    service, sink = bounded()
    idle, busy = connect(service), connect(service)
    body = export_request([b"\1" * 8])
    busy.sendall(export_head(len(body)))  # its head arrived before the stop, its body after
    time.sleep(0.2)
    assert service.stop_intake(timeout_s=5) is True
    busy.sendall(body)
    status, headers, _ = read_response(busy)
    assert (status, headers.get("Retry-After"), headers.get("Connection")) == (503, "1", "close")
    assert closed_by_server(idle)
    assert sink.items == []
    with pytest.raises(ConnectionRefusedError):
        connect(service)


def test_stop_intake_waits_until_the_request_in_a_handler_is_answered(bounded: Bounded) -> None:
    """A request already submitting when the stop begins is answered 200 before stop_intake
    returns, so that everything answered 200 was submitted before the pipeline stops."""
    service, sink = bounded()
    entered, release = threading.Event(), threading.Event()
    accept = sink.submit

    def slow_submit(item: WorkItem, timeout: float | None = None) -> bool:
        entered.set()
        release.wait(5)
        return accept(item, timeout)

    sink.submit = slow_submit  # type: ignore[method-assign]
    client = http.client.HTTPConnection("127.0.0.1", service.port, timeout=10)
    client.request("POST", "/v1/traces", export_request([b"\1" * 8]), {"Content-Type": PROTOBUF})
    assert entered.wait(5)
    stopped: list[bool] = []
    stopper = threading.Thread(target=lambda: stopped.append(service.stop_intake(timeout_s=10)))
    stopper.start()
    stopper.join(0.5)
    assert stopper.is_alive()  # still waiting for the handler
    release.set()
    response = client.getresponse()
    stopper.join(5)
    assert (response.status, response.getheader("Connection")) == (200, "close")
    assert stopped == [True]
    assert len(sink.items) == 1


@pytest.mark.parametrize("value", ["", "   ", "\t\n"], ids=["empty", "spaces", "tab-newline"])
def test_a_blank_token_variable_fails_start_up(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """A token variable that is empty or only whitespace is refused like an unset one."""
    monkeypatch.setenv("OTLP_TOKEN", value)
    with pytest.raises(ValueError, match=r"service\.auth_token_env names 'OTLP_TOKEN'"):
        write_token("OTLP_TOKEN")
