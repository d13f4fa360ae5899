"""OTLP/gRPC receiver: ``opentelemetry.proto.collector.trace.v1.TraceService/Export`` and
``opentelemetry.proto.collector.logs.v1.LogsService/Export`` (evaluation results,
``collectors/otlp/logs.py``; the same auth, budget and status codes).

Status codes follow the OTLP specification: INVALID_ARGUMENT for an undecodable
message or when every span was refused (not retryable), UNAVAILABLE when the
pipeline queue stays full (retryable), UNAUTHENTICATED without the bearer
token, RESOURCE_EXHAUSTED over ``max_request_bytes`` (from grpc itself) and,
with RetryInfo so that exporters retry, when the bytes in flight are over
``max_inflight_bytes`` (the budget shared with the OTLP/HTTP receiver,
``monitor/contract/inflight.py``).

The servicer takes the message as bytes (no deserializer in grpc): it reserves
them in the budget before parsing, so a refused message costs no parse. grpc
has read the whole message by then; see ``OtlpGrpcReceiver`` for what the budget
cannot cover.
"""

from __future__ import annotations

import hmac
from concurrent import futures
from typing import NoReturn

import grpc
from google.protobuf.duration_pb2 import Duration
from google.rpc.error_details_pb2 import RetryInfo
from google.rpc.status_pb2 import Status

from collectors.otlp import export_decoding
from collectors.otlp.config import OtlpConfig
from monitor.contract.http.limits import refused_counter
from monitor.contract.inflight import OTLP_DECODE_FACTOR, ByteBudget
from monitor.contract.work_items import Consumer, Events, SpanBatch

SERVICE = "opentelemetry.proto.collector.trace.v1.TraceService"
LOGS_SERVICE = "opentelemetry.proto.collector.logs.v1.LogsService"
_SUBMIT_TIMEOUT_S = 2.0
_KEEPALIVE_TIMEOUT_MS = 20_000  # a ping unanswered this long drops the connection
_STOP_MARGIN_S = 2.0
_RETRY_DELAY = Duration(seconds=1)
_INFLIGHT_MESSAGE = "too many request bytes in flight, retry later"


class _TraceService:
    def __init__(self, pipeline: Consumer, token: str | None, budget: ByteBudget) -> None:
        self._pipeline = pipeline
        self._expected_auth = f"Bearer {token}".encode() if token else None
        self._budget = budget
        self._refused = refused_counter(pipeline.metrics.registry).labels(
            "otlp_grpc", "inflight_bytes"
        )

    def export(self, message: bytes, context: grpc.ServicerContext) -> bytes:
        return self._guarded(message, context, export_decoding.spans)

    def export_logs(self, message: bytes, context: grpc.ServicerContext) -> bytes:
        return self._guarded(message, context, export_decoding.evaluation_results)

    def _guarded(
        self, message: bytes, context: grpc.ServicerContext, signal: export_decoding.Signal
    ) -> bytes:
        """The token and the byte budget, then the export."""
        if self._expected_auth is not None:
            given = dict(context.invocation_metadata()).get("authorization", "")
            if not hmac.compare_digest(str(given).encode(), self._expected_auth):
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")
        if not self._budget.admit(len(message)):
            self._refused.inc()
            _abort_retryable(context, grpc.StatusCode.RESOURCE_EXHAUSTED, _INFLIGHT_MESSAGE)
        try:
            with self._budget.decoding(OTLP_DECODE_FACTOR * len(message)):
                return self._export(message, context, signal)
        finally:
            self._budget.release(len(message))

    def _export(
        self, message: bytes, context: grpc.ServicerContext, signal: export_decoding.Signal
    ) -> bytes:
        """An OTLP export through its signal's intake step; the response serialized (an
        empty response of either service is no bytes)."""
        try:
            item, decoded = signal(message, False, "otlp", self._pipeline.metrics)
        except export_decoding.Empty:
            self._pipeline.metrics.count_record("otlp", "ok")
            return b""
        except export_decoding.Invalid as refusal:
            self._invalid(context, refusal)
        self._submit(context, item)
        return bytes(decoded.export_response().SerializeToString())

    def _invalid(self, context: grpc.ServicerContext, refusal: export_decoding.Invalid) -> NoReturn:
        self._pipeline.metrics.count_record("otlp", "invalid")
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(refusal))
        raise AssertionError("context.abort returns only by raising")

    def _submit(self, context: grpc.ServicerContext, item: SpanBatch | Events) -> None:
        try:
            export_decoding.submit(self._pipeline, item, _SUBMIT_TIMEOUT_S)
        except export_decoding.RetryLater as refusal:
            context.abort(grpc.StatusCode.UNAVAILABLE, str(refusal))


def _abort_retryable(context: grpc.ServicerContext, code: grpc.StatusCode, message: str) -> None:
    """Abort with RetryInfo, which OTLP exporters need to retry RESOURCE_EXHAUSTED: in
    the status details (the Collector's exporters) and on its own (the Python one)."""
    retry = RetryInfo(retry_delay=_RETRY_DELAY)
    status = Status(code=code.value[0], message=message)
    status.details.add().Pack(retry)
    context.set_trailing_metadata((
        ("grpc-status-details-bin", status.SerializeToString()),
        ("google.rpc.retryinfo-bin", retry.SerializeToString()),
    ))  # fmt: skip
    context.abort(code, message)


class OtlpGrpcReceiver:
    """The gRPC server on its own port; ``shutdown`` is safe before start and twice.

    Bounds (``collectors.otlp.grpc``): connections (``max_connections``), RPCs
    running or queued (``max_concurrent_rpcs``: beyond, grpc answers
    RESOURCE_EXHAUSTED), streams per connection, message size
    (``max_request_bytes``), idle connections closed, silent clients pinged, a
    handshake deadline. grpc refuses these itself; it offers no hook to count them.

    The byte budget sees a message once grpc hands it over whole. Before that grpc
    holds it: a handler thread asks grpc for the message only when it takes the RPC,
    so at most ``handler_threads`` messages are being received at once (each up to
    ``max_request_bytes``, briefly twice while grpc copies it to Python), and an RPC
    still queued for a thread holds no more than its HTTP/2 flow-control window.
    """

    def __init__(self, config: OtlpConfig, pipeline: Consumer, token: str | None = None) -> None:
        self._config = config
        budget = pipeline.metrics.registry.budget("otlp", config.max_inflight_bytes)
        self._service = _TraceService(pipeline, token, budget)
        self._server: grpc.Server | None = None
        self.port: int = config.grpc.port

    def start(self) -> None:
        listener = self._config.grpc
        server = grpc.server(
            futures.ThreadPoolExecutor(listener.handler_threads, thread_name_prefix="otlp-grpc"),
            options=_server_options(self._config),
            maximum_concurrent_rpcs=listener.max_concurrent_rpcs,
        )
        # Messages in and out as bytes: no (de)serializers.
        export = grpc.unary_unary_rpc_method_handler(self._service.export)
        export_logs = grpc.unary_unary_rpc_method_handler(self._service.export_logs)
        server.add_generic_rpc_handlers((
            grpc.method_handlers_generic_handler(SERVICE, {"Export": export}),
            grpc.method_handlers_generic_handler(LOGS_SERVICE, {"Export": export_logs}),
        ))  # fmt: skip
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
