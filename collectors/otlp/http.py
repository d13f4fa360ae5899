"""OTLP/HTTP receiver: ``POST /v1/traces`` and ``/v1/logs`` (protobuf or JSON),
``/v1/labels``, ``/v1/feedback``.

Answers follow the OTLP/HTTP specification: 200 with an
``ExportTraceServiceResponse`` (``partial_success`` when some spans were
refused), 400 with a ``google.rpc.Status`` for an undecodable body, 413 over
``max_request_bytes``, 415 for other media types, 411 without Content-Length,
503 with ``Retry-After`` when the pipeline queue stays full or the bytes in
flight are over ``max_inflight_bytes`` (and, with ``Connection: close``, once
the sidecar is stopping), 401 without the bearer token once one is set. The
transport and its bounds are ``monitor/contract/http/service.py``'s; the byte budget is
shared with the gRPC receiver (``monitor/contract/inflight.py``).
"""

from __future__ import annotations

import hmac
import zlib
from collections.abc import Callable, Sequence

import orjson
from google.rpc.status_pb2 import Status

from collectors.otlp import export_decoding
from collectors.otlp.config import OtlpConfig
from monitor.contract.events import parse_feedback, parse_labels
from monitor.contract.http.limits import HttpLimits
from monitor.contract.http.service import HttpService
from monitor.contract.http.wire import Request, Response
from monitor.contract.inflight import OTLP_DECODE_FACTOR
from monitor.contract.trace import Event
from monitor.contract.work_items import Consumer, Events, SpanBatch

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
            budget=registry.budget("otlp", config.max_inflight_bytes),
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
        except export_decoding.Invalid as refusal:
            return self._refusal(_Refused(400, str(refusal)), content_type)
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
    return _export(receiver, body, content_type, export_decoding.spans)


def _export_logs(receiver: OtlpHttpReceiver, body: bytes, content_type: str) -> bytes:
    """``/v1/logs``: gen_ai.evaluation.result records become events (collectors/otlp/logs.py)."""
    return _export(receiver, body, content_type, export_decoding.evaluation_results)


def _export(
    receiver: OtlpHttpReceiver, body: bytes, content_type: str, signal: export_decoding.Signal
) -> bytes:
    """An OTLP export through its signal's intake step, answered in the body's encoding."""
    is_json = _otlp_is_json(content_type)
    try:
        item, decoded = signal(body, is_json, "otlp", receiver.pipeline.metrics)
    except export_decoding.Empty:
        receiver.pipeline.metrics.count_record("otlp", "ok")  # an empty export is valid
        return b"{}" if is_json else b""
    _submit(receiver, item)
    if is_json:
        return decoded.json_response()
    return bytes(decoded.export_response().SerializeToString())


def _otlp_is_json(content_type: str) -> bool:
    if content_type not in (PROTOBUF, JSON):
        raise _Refused(415, f"Content-Type must be {PROTOBUF} or {JSON}")
    return content_type == JSON


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
    item = export_decoding.events(body, parse, "otlp")
    _submit(receiver, item)
    return orjson.dumps({"accepted": len(item.events)})


def _submit(receiver: OtlpHttpReceiver, item: SpanBatch | Events) -> None:
    try:
        export_decoding.submit(receiver.pipeline, item, _SUBMIT_TIMEOUT_S)
    except export_decoding.RetryLater as refusal:
        raise _Refused(503, str(refusal), {"Retry-After": "1"}) from refusal


_ROUTES: dict[str, Callable[[OtlpHttpReceiver, bytes, str], bytes]] = {
    "/v1/traces": _export_traces,
    "/v1/logs": _export_logs,
    "/v1/labels": _post_labels,
    "/v1/feedback": _post_feedback,
}
