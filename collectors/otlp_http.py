"""OTLP/HTTP receiver: ``POST /v1/traces`` and ``/v1/logs`` (protobuf or JSON),
``/v1/labels``, ``/v1/feedback``.

Answers follow the OTLP/HTTP specification: 200 with an
``ExportTraceServiceResponse`` (``partial_success`` when some spans were
refused), 400 with a ``google.rpc.Status`` for an undecodable body, 413 over
``max_request_bytes``, 415 for other media types, 411 without Content-Length,
503 with ``Retry-After`` when the pipeline queue stays full or the bytes in
flight are over ``max_inflight_bytes`` (and, with ``Connection: close``, once
the sidecar is stopping), 401 without the bearer token once one is set. The
transport and its bounds are ``monitor/http/service.py``'s; the byte budget is
shared with the gRPC receiver (``monitor/http/inflight.py``).
"""

from __future__ import annotations

import hmac
import zlib
from collections.abc import Callable, Sequence

import orjson
from google.rpc.status_pb2 import Status

from collectors.otlp import DecodedSpans, PayloadError, decode_otlp_json, decode_otlp_proto
from collectors.otlp_config import OtlpConfig
from collectors.otlp_logs import decode_logs_json, decode_logs_proto
from monitor.events import InvalidRecord, parse_feedback, parse_labels
from monitor.http.inflight import OTLP_DECODE_FACTOR, shared_budget
from monitor.http.limits import HttpLimits
from monitor.http.service import HttpService
from monitor.http.wire import Request, Response
from monitor.intake import Consumer, Events, SpanBatch
from monitor.trace import Event

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
_INVALID_ARGUMENT = 3  # google.rpc.Code
_SUBMIT_TIMEOUT_S = 2.0
# Statuses that mean "this body is bad" and count as an invalid record.
_INVALID_BODY_STATUSES = frozenset({400, 411, 413, 415})
# A refused body up to this many times max_request_bytes is read and dropped.
_DISCARD_FACTOR = 4


class _Refused(Exception):
    """Ends a request with an HTTP error status; the message goes into the body."""

    def __init__(
        self, status: int, message: str, headers: dict[str, str] | None = None, close: bool = False
    ) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}
        self.close = close


class OtlpHttpReceiver(HttpService):
    """The receiver; one instance per sidecar. The route, the token and the declared
    length are checked on the head, before the body is read (and its bytes reserved);
    decoding and the pipeline's submit run on a handler thread."""

    def __init__(self, config: OtlpConfig, pipeline: Consumer, token: str | None = None) -> None:
        self.config = config
        self.pipeline = pipeline
        self.token = token  # service.auth_token_env, resolved by the sidecar
        self._expected_auth = f"Bearer {self.token}".encode() if self.token else None
        registry = pipeline.metrics.registry
        super().__init__(
            "otlp_http",
            config.http.host,
            config.http.port,
            HttpLimits.of(config.http),
            registry=registry,
            budget=shared_budget(registry, "otlp", config.max_inflight_bytes),
            discard_bytes=_DISCARD_FACTOR * config.max_request_bytes,
        )

    def refuse(self, request: Request) -> Response | None:
        limit = self.config.max_request_bytes
        try:
            if request.path not in _ROUTES:
                raise _Refused(404, "unknown path")
            if request.method != "POST":
                raise _Refused(405, "only POST", {"Allow": "POST"})
            given = request.headers.get("authorization", "").encode()
            if self._expected_auth is not None and not hmac.compare_digest(
                given, self._expected_auth
            ):
                raise _Refused(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})
            if request.content_length is None:
                raise _Refused(411, "Content-Length is required", close=True)
            if request.content_length > limit:
                raise _Refused(
                    413, f"body of {request.content_length} bytes exceeds max_request_bytes {limit}"
                )
        except _Refused as refusal:
            return self._refusal(refusal, _content_type(request))
        return None

    def handle(self, request: Request) -> Response:
        content_type = _content_type(request)
        try:
            body = _decoded_body(request, self.config.max_request_bytes)
            # The body is reserved already; an inflated copy and what decoding makes of
            # it are held until the spans are submitted.
            inflated = len(body) if body is not request.body else 0
            with self.budget.decoding(inflated + OTLP_DECODE_FACTOR * len(body)):
                answer = _ROUTES[request.path](self, body, content_type)
        except _Refused as refusal:
            return self._refusal(refusal, content_type)
        return Response(200, answer, PROTOBUF if content_type == PROTOBUF else JSON)

    def _refusal(self, refusal: _Refused, content_type: str) -> Response:
        if refusal.status in _INVALID_BODY_STATUSES:
            self.pipeline.metrics.count_record("otlp", "invalid")
        status = Status(code=_INVALID_ARGUMENT, message=str(refusal))
        if content_type == PROTOBUF:
            body, media = status.SerializeToString(), PROTOBUF
        else:
            body, media = orjson.dumps({"code": status.code, "message": status.message}), JSON
        return Response(refusal.status, body, media, refusal.headers, refusal.close)


def _content_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


def _decoded_body(request: Request, limit: int) -> bytes:
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding == "gzip":
        return _gunzip(request.body, limit)
    if encoding not in ("identity", ""):
        raise _Refused(415, f"unsupported Content-Encoding {encoding!r}")
    return request.body


def _gunzip(body: bytes, limit: int) -> bytes:
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        # Bounded output: a small bomb must not inflate past the limit in memory.
        data = inflater.decompress(body, limit + 1)
    except zlib.error as exc:
        raise _Refused(400, "invalid gzip body") from exc
    if len(data) > limit or inflater.unconsumed_tail:
        raise _Refused(413, f"decompressed body exceeds max_request_bytes {limit}")
    if not inflater.eof:
        raise _Refused(400, "truncated gzip body")
    return data


def _export_traces(receiver: OtlpHttpReceiver, body: bytes, content_type: str) -> bytes:
    if content_type not in (PROTOBUF, JSON):
        raise _Refused(415, f"Content-Type must be {PROTOBUF} or {JSON}")
    try:
        decoded = decode_otlp_proto(body) if content_type == PROTOBUF else decode_otlp_json(body)
    except PayloadError as exc:
        raise _Refused(400, str(exc)) from exc
    metrics = receiver.pipeline.metrics
    if decoded.rejected:
        metrics.rejected_spans.labels("otlp").inc(decoded.rejected)
        if not decoded.spans:
            raise _Refused(400, f"every span was rejected: {decoded.first_error}")
    if decoded.spans:
        _submit(receiver, SpanBatch(decoded.spans, "otlp"))
    else:
        metrics.count_record("otlp", "ok")  # an empty export is valid
    return _export_response(decoded, content_type)


def _export_response(decoded: DecodedSpans, content_type: str) -> bytes:
    if content_type == JSON:
        if not decoded.rejected:
            return b"{}"
        partial = {"rejectedSpans": str(decoded.rejected), "errorMessage": decoded.first_error}
        return orjson.dumps({"partialSuccess": partial})
    return bytes(decoded.export_response().SerializeToString())


def _export_logs(receiver: OtlpHttpReceiver, body: bytes, content_type: str) -> bytes:
    """``/v1/logs``: gen_ai.evaluation.result records become events (collectors/otlp_logs.py)."""
    if content_type not in (PROTOBUF, JSON):
        raise _Refused(415, f"Content-Type must be {PROTOBUF} or {JSON}")
    try:
        decoded = decode_logs_proto(body) if content_type == PROTOBUF else decode_logs_json(body)
    except PayloadError as exc:
        raise _Refused(400, str(exc)) from exc
    decoded.count(receiver.pipeline.metrics.registry, "otlp")
    if decoded.rejected and not decoded.results and not decoded.ignored:
        raise _Refused(400, f"every log record was rejected: {decoded.first_error}")
    if decoded.results:
        _submit(receiver, Events(decoded.results, "otlp"))
    else:
        receiver.pipeline.metrics.count_record("otlp", "ok")
    if content_type == JSON:
        return decoded.json_response()
    return bytes(decoded.export_response().SerializeToString())


def _post_labels(receiver: OtlpHttpReceiver, body: bytes, content_type: str) -> bytes:
    return _post_events(receiver, body, content_type, parse_labels)


def _post_feedback(receiver: OtlpHttpReceiver, body: bytes, content_type: str) -> bytes:
    return _post_events(receiver, body, content_type, parse_feedback)


def _post_events(
    receiver: OtlpHttpReceiver,
    body: bytes,
    content_type: str,
    parse: Callable[[bytes], Sequence[Event]],
) -> bytes:
    if content_type != JSON:
        raise _Refused(415, f"Content-Type must be {JSON}")
    try:
        events = parse(body)
    except InvalidRecord as exc:
        raise _Refused(400, str(exc)) from exc
    _submit(receiver, Events(events, "otlp"))
    return orjson.dumps({"accepted": len(events)})


def _submit(receiver: OtlpHttpReceiver, item: SpanBatch | Events) -> None:
    if not receiver.pipeline.submit(item, timeout=_SUBMIT_TIMEOUT_S):
        raise _Refused(503, "pipeline queue is full, retry later", {"Retry-After": "1"})


_ROUTES: dict[str, Callable[[OtlpHttpReceiver, bytes, str], bytes]] = {
    "/v1/traces": _export_traces,
    "/v1/logs": _export_logs,
    "/v1/labels": _post_labels,
    "/v1/feedback": _post_feedback,
}
