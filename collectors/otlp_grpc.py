"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export``.

Status codes follow the OTLP specification: INVALID_ARGUMENT when every span
was refused (not retryable), UNAVAILABLE when the pipeline queue stays full
(retryable), UNAUTHENTICATED without the bearer token, RESOURCE_EXHAUSTED
(from grpc itself) over ``max_request_bytes``.
"""

from __future__ import annotations

import hmac
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import (
    TraceServiceServicer,
    add_TraceServiceServicer_to_server,
)

from collectors.otlp import spans_from_request
from monitor.components import write_token
from monitor.config import OtlpConfig
from monitor.pipeline import Consumer, SpanBatch

_SUBMIT_TIMEOUT_S = 2.0
_KEEPALIVE_TIMEOUT_MS = 20_000  # a ping unanswered this long drops the connection
_STOP_MARGIN_S = 2.0


class _TraceService(TraceServiceServicer):
    def __init__(self, pipeline: Consumer, token: str | None) -> None:
        self._pipeline = pipeline
        self._expected_auth = f"Bearer {token}".encode() if token else None

    def Export(
        self, request: ExportTraceServiceRequest, context: grpc.ServicerContext
    ) -> ExportTraceServiceResponse:
        if self._expected_auth is not None:
            given = dict(context.invocation_metadata()).get("authorization", "")
            if not hmac.compare_digest(str(given).encode(), self._expected_auth):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        metrics = self._pipeline.metrics
        decoded = spans_from_request(request)
        if decoded.rejected:
            metrics.rejected_spans.labels("otlp").inc(decoded.rejected)
            if not decoded.spans:
                metrics.count_record("otlp", "invalid")
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"every span was rejected: {decoded.first_error}",
                )
        if not decoded.spans:
            metrics.count_record("otlp", "ok")
        elif not self._pipeline.submit(SpanBatch(decoded.spans, "otlp"), _SUBMIT_TIMEOUT_S):
            context.abort(grpc.StatusCode.UNAVAILABLE, "pipeline queue is full, retry later")
        return decoded.export_response()


class OtlpGrpcReceiver:
    """The gRPC server on its own port; ``shutdown`` is safe before start and twice.

    Bounds (``collectors.otlp.grpc``): connections (``max_connections``), RPCs
    running or queued (``max_concurrent_rpcs``: beyond, grpc answers
    RESOURCE_EXHAUSTED), streams per connection, message size
    (``max_request_bytes``), idle connections closed, silent clients pinged, a
    handshake deadline. grpc refuses these itself; it offers no hook to count them.
    """

    def __init__(self, config: OtlpConfig, pipeline: Consumer) -> None:
        self._config = config
        self._service = _TraceService(pipeline, write_token(config.auth_token_env))
        self._server: grpc.Server | None = None
        self.port: int = config.grpc.port

    def start(self) -> None:
        listener = self._config.grpc
        server = grpc.server(
            futures.ThreadPoolExecutor(listener.handler_threads, thread_name_prefix="otlp-grpc"),
            options=_server_options(self._config),
            maximum_concurrent_rpcs=listener.max_concurrent_rpcs,
        )
        add_TraceServiceServicer_to_server(self._service, server)  # type: ignore[no-untyped-call]
        address = f"{listener.host}:{listener.port}"
        self.port = server.add_insecure_port(address)
        if self.port == 0:
            raise OSError(f"cannot listen on {address}")
        server.start()
        self._server = server

    def stop_intake(self, timeout_s: float) -> bool:
        """Refuse new RPCs and wait up to ``timeout_s`` for those running to finish (past
        it they are cancelled: their clients see CANCELLED, not OK). True when they did."""
        server, self._server = self._server, None
        if server is None:
            return True
        return bool(server.stop(timeout_s).wait(timeout_s + _STOP_MARGIN_S))

    def shutdown(self) -> None:
        self.stop_intake(0)


def _server_options(config: OtlpConfig) -> list[tuple[str, int]]:
    listener = config.grpc
    return [
        ("grpc.max_receive_message_length", config.max_request_bytes),
        ("grpc.max_concurrent_streams", listener.max_concurrent_streams),
        ("grpc.max_allowed_incoming_connections", listener.max_connections),
        ("grpc.max_connection_idle_ms", int(listener.idle_timeout_s * 1000)),
        ("grpc.keepalive_time_ms", int(listener.keepalive_s * 1000)),
        ("grpc.keepalive_timeout_ms", _KEEPALIVE_TIMEOUT_MS),
        ("grpc.server_handshake_timeout_ms", int(listener.handshake_timeout_s * 1000)),
    ]
