"""The bytes-in-flight budget (monitor/contract/inflight.py): ByteBudget on its own; the OTLP/HTTP
receiver reserving a body before reading it and giving it back however the request ends;
the OTLP/gRPC receiver sharing that budget; the review page's own budget."""

from __future__ import annotations

import gzip
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from opentelemetry.sdk.trace.export import SpanExportResult

from collectors.otlp.config import OtlpConfig
from collectors.otlp.grpc import OtlpGrpcReceiver
from collectors.otlp.http import OtlpHttpReceiver
from detectors.review.config import ReviewHttpSettings
from detectors.review.store import ReviewStore
from detectors.review.web import FORMS_IN_FLIGHT, ReviewPage
from monitor.contract.http.endpoints import METRICS_INFLIGHT_BYTES, MetricsServer, Readiness
from monitor.contract.inflight import OTLP_DECODE_FACTOR, ByteBudget
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.work_items import WorkItem
from monitor.runtime.config_loading import ConfigError, load_config
from tests.conftest import sample, sdk_request, wait_until
from tests.otel_traffic import MemoryExporter, RagRequest, emit_rag_request, tracer_for
from tests.unit.collectors.otlp.test_http import (
    SinkConsumer,
    closed_by_server,
    export_head,
    export_request,
    read_response,
)

# --- ByteBudget --------------------------------------------------------------------------


def test_admit_reserves_what_fits_and_refuses_the_rest() -> None:
    """Bytes are reserved while they fit under the limit; a request that does not fit
    reserves nothing; release gives bytes back; the gauges show both."""
    registry = SidecarRegistry()
    budget = registry.budget("test", 100)
    assert budget.admit(60)
    assert not budget.admit(50)
    assert budget.reserved == 60
    assert budget.admit(40)
    assert budget.reserved == 100
    budget.release(60)
    assert sample(registry, "rag_monitor_inflight_bytes", budget="test") == 40
    assert sample(registry, "rag_monitor_inflight_max_bytes", budget="test") == 100


def test_a_decode_alone_goes_past_the_limit_and_gives_its_bytes_back() -> None:
    """With no other decode running, decoding holds its bytes even past the limit (an
    admitted request always finishes), and only while the block runs."""
    budget = ByteBudget("test", 100)
    assert budget.admit(90)
    with budget.decoding(50):
        assert budget.reserved == 140
        assert not budget.admit(1)  # new requests wait for room meanwhile
    assert budget.reserved == 90


def test_a_decode_that_does_not_fit_waits_for_the_running_one() -> None:
    """A second decode that does not fit beside the first waits until the first ends,
    then holds its bytes; at the end nothing is reserved."""
    budget = ByteBudget("test", 100)
    first_in, first_go, second_in = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with budget.decoding(80):
            first_in.set()
            first_go.wait(5)

    def second() -> None:
        with budget.decoding(50):
            second_in.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    threads[0].start()
    assert first_in.wait(5)
    threads[1].start()
    assert not second_in.wait(0.2)  # 80 + 50 > 100 while the first decodes
    first_go.set()
    assert second_in.wait(5)
    for thread in threads:
        thread.join(5)
    assert budget.reserved == 0


def test_servers_of_one_registry_share_one_budget_by_name() -> None:
    """A sidecar hands out one budget per name; another sidecar's is its own."""
    registry = SidecarRegistry()
    assert registry.budget("otlp", 10) is registry.budget("otlp", 10)
    assert registry.budget("otlp", 10) is not SidecarRegistry().budget("otlp", 10)


def test_the_metrics_server_shows_its_own_budget() -> None:
    """The /metrics server's small budget for stray bodies is on the budget gauges too."""
    registry = SidecarRegistry()
    MetricsServer("127.0.0.1", 0, registry, Readiness())
    budget = {"budget": "metrics"}
    assert sample(registry, "rag_monitor_inflight_max_bytes", **budget) == METRICS_INFLIGHT_BYTES
    assert sample(registry, "rag_monitor_inflight_bytes", **budget) == 0


def test_a_budget_smaller_than_one_body_is_a_config_error() -> None:
    """max_inflight_bytes below max_request_bytes would refuse such bodies forever: the
    configuration fails to load, naming the section."""
    with pytest.raises(ConfigError, match=r"collectors\.otlp: .*max_inflight_bytes must be"):
        load_config(environ={"RAG_MONITOR_COLLECTORS__OTLP__MAX_INFLIGHT_BYTES": "1000"})


# --- the OTLP/HTTP receiver --------------------------------------------------------------

BODY_LIMIT = 1000
BUDGET = 2 * BODY_LIMIT


class Held:
    """A receiver with a small budget whose consumer's submit can be held."""

    def __init__(self, **otlp: object) -> None:
        self.sink = SinkConsumer(SidecarRegistry())
        self.entered, self.go = threading.Event(), threading.Event()
        self.fail = False
        accept = self.sink.submit

        def held_submit(item: WorkItem, timeout: float | None = None) -> bool:
            self.entered.set()
            self.go.wait(5)
            if self.fail:
                raise RuntimeError("consumer broke")
            return accept(item, timeout)

        self.sink.submit = held_submit  # type: ignore[method-assign]
        config = OtlpConfig.model_validate({
            "http": {"port": 0, "body_timeout_s": 0.5},
            "max_request_bytes": BODY_LIMIT,
            "max_inflight_bytes": BUDGET,
            **otlp,
        })  # fmt: skip
        self.service = OtlpHttpReceiver(config, self.sink)
        self.service.start()

    @property
    def reserved(self) -> int:
        return self.service.budget.reserved

    def connect(self) -> socket.socket:
        return socket.create_connection(("127.0.0.1", self.service.port), timeout=5)

    def refused(self, reason: str) -> float:
        registry = self.sink.metrics.registry
        return sample(registry, "rag_monitor_http_refused_total", server="otlp_http", reason=reason)


@pytest.fixture
def held() -> Iterator[Held]:
    running = Held()
    yield running
    running.go.set()
    running.service.shutdown()


def stall(held: Held, declared: int = BODY_LIMIT) -> socket.socket:
    """A client that declares ``declared`` bytes, sends 10 of them and waits."""
    sock = held.connect()
    sock.sendall(export_head(declared) + b"\0" * 10)
    return sock


def test_past_the_budget_a_request_is_refused_before_its_body_is_read(held: Held) -> None:
    """With the budget held by two stalled bodies, a third request is answered 503 +
    Retry-After on its head alone and counted; the connection stays open, its body is
    read and dropped, and it serves the next request once the budget has room."""
    stalled = [stall(held), stall(held)]
    wait_until(lambda: held.reserved == BUDGET, timeout=5)
    late = held.connect()
    late.sendall(export_head(BODY_LIMIT))  # the head only
    status, headers, _ = read_response(late)
    assert (status, headers.get("Retry-After"), headers.get("Connection")) == (503, "1", None)
    assert held.refused("inflight_bytes") == 1
    late.sendall(b"\0" * BODY_LIMIT)  # dropped by the server
    for sock in stalled:
        sock.close()
    wait_until(lambda: held.reserved == 0, timeout=5)
    held.go.set()
    body = export_request([b"\1" * 8])
    late.sendall(export_head(len(body)) + body)
    assert read_response(late)[0] == 200
    assert len(held.sink.items) == 1


def test_a_refused_request_that_waits_for_100_continue_is_answered_and_closed(
    held: Held,
) -> None:
    """A client waiting for 100 Continue sends no body after a refusal: the server answers
    503 and hangs up rather than wait for a body that will not come."""
    stalled = [stall(held), stall(held)]
    wait_until(lambda: held.reserved == BUDGET, timeout=5)
    late = held.connect()
    late.sendall(export_head(BODY_LIMIT, "Expect: 100-continue\r\n"))
    status, headers, _ = read_response(late)
    assert (status, headers.get("Connection")) == (503, "close")
    assert closed_by_server(late)
    for sock in stalled:
        sock.close()


def _answered(held: Held, body: bytes, headers: str = "") -> Callable[[], int]:
    """Send a whole request whose submit is held; returns what ends it (its status)."""
    sock = held.connect()
    sock.sendall(export_head(len(body), headers) + body)
    assert held.entered.wait(5)

    def end() -> int:
        held.go.set()
        return read_response(sock)[0]

    return end


BODY = export_request([b"\1" * 8, b"\2" * 8])
GZIPPED = gzip.compress(BODY)
DECODING = len(BODY) * (1 + OTLP_DECODE_FACTOR)  # the body and what decoding makes of it


def answered(held: Held) -> Callable[[], int]:
    return _answered(held, BODY)


def answered_gzip(held: Held) -> Callable[[], int]:
    return _answered(held, GZIPPED, "Content-Encoding: gzip\r\n")


def handler_error(held: Held) -> Callable[[], int]:
    held.fail = True
    return _answered(held, BODY)


def client_left(held: Held) -> Callable[[], None]:
    return stall(held).close


def body_timeout(held: Held) -> Callable[[], int]:
    sock = stall(held)
    return lambda: read_response(sock)[0]


def shutdown(held: Held) -> Callable[[], None]:
    sock = stall(held)

    def end() -> None:
        held.service.shutdown()
        sock.close()

    return end


@pytest.mark.parametrize(
    ("start", "holds", "status"),
    [
        (answered, DECODING, 200),
        (answered_gzip, len(GZIPPED) + DECODING, 200),
        (handler_error, DECODING, 500),
        (client_left, BODY_LIMIT, None),
        (body_timeout, BODY_LIMIT, 408),
        (shutdown, BODY_LIMIT, None),
    ],
    ids=["answered", "answered-gzip", "handler-error", "client-left", "body-timeout", "shutdown"],
)
def test_the_reservation_is_given_back_however_the_request_ends(
    held: Held,
    start: Callable[[Held], Callable[[], int | None]],
    holds: int,
    status: int | None,
) -> None:
    """While a request is in flight the budget holds its body (and, while it decodes and
    submits, its inflated body and decoding's share); once it ends, by an answer, a
    handler error, the client leaving, the body timeout or the server's shutdown,
    nothing is left reserved."""
    end = start(held)
    wait_until(lambda: held.reserved == holds, timeout=5)
    assert end() == status
    wait_until(lambda: held.reserved == 0, timeout=5)


def test_an_undecodable_body_gives_its_bytes_back(held: Held) -> None:
    """A body refused 400 by the decoder leaves nothing reserved."""
    sock = held.connect()
    garbage = b"\xff\x00 not protobuf"
    sock.sendall(export_head(len(garbage)) + garbage)
    assert read_response(sock)[0] == 400
    wait_until(lambda: held.reserved == 0, timeout=5)


# --- the OTLP/gRPC receiver --------------------------------------------------------------


def test_grpc_shares_the_budget_and_refuses_with_retry_info() -> None:
    """With the shared budget held by a stalled HTTP body, an Export is RESOURCE_EXHAUSTED
    with RetryInfo (in the status details and on its own) and counted; the OTLP gRPC
    exporter retries it and succeeds once the HTTP body is gone; nothing stays reserved."""
    limit = 64 * 1024
    held = Held(max_request_bytes=limit, max_inflight_bytes=limit, grpc={"port": 0})
    held.go.set()
    receiver = OtlpGrpcReceiver(held.service.config, held.sink)
    receiver.start()
    try:
        staller = stall(held, declared=limit)
        wait_until(lambda: held.reserved == limit, timeout=5)
        with grpc.insecure_channel(f"127.0.0.1:{receiver.port}") as channel:
            request = ExportTraceServiceRequest.FromString(sdk_request())
            with pytest.raises(grpc.RpcError) as refused:
                TraceServiceStub(channel).Export(request, timeout=5)  # type: ignore[no-untyped-call]
        error = refused.value
        assert error.code() is grpc.StatusCode.RESOURCE_EXHAUSTED  # type: ignore[attr-defined]
        trailers = dict(error.trailing_metadata())  # type: ignore[attr-defined]
        details = Status.FromString(trailers["grpc-status-details-bin"])
        retry = RetryInfo()
        assert details.details[0].Unpack(retry)
        assert retry.retry_delay.seconds == 1
        assert RetryInfo.FromString(trailers["google.rpc.retryinfo-bin"]) == retry
        registry = held.sink.metrics.registry
        refusals = sample(registry, "rag_monitor_http_refused_total", server="otlp_grpc")
        assert refusals == 1

        memory = MemoryExporter()
        _, tracer = tracer_for(memory)
        emit_rag_request(tracer, RagRequest(start_ns=time.time_ns()))
        exporter = OTLPSpanExporter(
            endpoint=f"127.0.0.1:{receiver.port}", insecure=True, timeout=10
        )
        results: list[SpanExportResult] = []
        thread = threading.Thread(target=lambda: results.append(exporter.export(memory.spans)))
        thread.start()
        wait_until(
            lambda: sample(registry, "rag_monitor_http_refused_total", server="otlp_grpc") == 2,
            timeout=5,
        )  # its first try was refused
        staller.close()
        thread.join(15)
        assert results == [SpanExportResult.SUCCESS]
        assert len(held.sink.items) == 1
        wait_until(lambda: held.reserved == 0, timeout=5)
    finally:
        receiver.shutdown()
        held.service.shutdown()


# --- the review page ---------------------------------------------------------------------


def test_the_review_page_refuses_forms_past_its_own_budget(tmp_path: Path) -> None:
    """The review page holds FORMS_IN_FLIGHT forms of max_body_bytes at most, shown on the
    budget gauges: one more is answered 503 + Retry-After before its body is read, counted
    under server="review"."""
    registry = SidecarRegistry()
    store = ReviewStore(tmp_path / "state")
    page = ReviewPage(
        ReviewHttpSettings(port=0, max_body_bytes=1024), store, None, lambda *_: None, registry
    )
    page.start()
    head = (
        b"POST /review/trace-1 HTTP/1.1\r\nHost: x\r\n"
        b"Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 1024\r\n\r\n"
    )
    stalled = []
    try:
        for _ in range(FORMS_IN_FLIGHT):
            sock = socket.create_connection(("127.0.0.1", page.port), timeout=5)
            sock.sendall(head + b"a=1")
            stalled.append(sock)
        wait_until(lambda: page.budget.reserved == FORMS_IN_FLIGHT * 1024, timeout=5)
        budget = {"budget": "review"}
        assert (
            sample(registry, "rag_monitor_inflight_max_bytes", **budget) == FORMS_IN_FLIGHT * 1024
        )
        assert sample(registry, "rag_monitor_inflight_bytes", **budget) == FORMS_IN_FLIGHT * 1024
        late = socket.create_connection(("127.0.0.1", page.port), timeout=5)
        late.sendall(head)
        status, headers, _ = read_response(late)
        assert (status, headers.get("Retry-After")) == (503, "1")
        reason = {"server": "review", "reason": "inflight_bytes"}
        assert sample(registry, "rag_monitor_http_refused_total", **reason) == 1
        late.close()
        for sock in stalled:
            sock.close()
        wait_until(lambda: page.budget.reserved == 0, timeout=5)
    finally:
        page.shutdown()
        store.close()
