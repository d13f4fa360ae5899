"""OTLP/HTTP receiver: ``POST /v1/traces`` (protobuf or JSON), ``/v1/labels``, ``/v1/feedback``.

Answers follow the OTLP/HTTP specification: 200 with an
``ExportTraceServiceResponse`` (``partial_success`` when some spans were
refused), 400 with a ``google.rpc.Status`` for an undecodable body, 413 over
``max_request_bytes``, 415 for other media types, 503 with ``Retry-After`` when
the pipeline queue stays full, 401 without the bearer token once one is set.
"""

from __future__ import annotations

import hmac
import os
import zlib
from collections.abc import Callable, Sequence

import orjson
from google.rpc.status_pb2 import Status

from collectors.otlp import DecodedSpans, PayloadError, decode_otlp_json, decode_otlp_proto
from monitor.config import OtlpConfig
from monitor.events import InvalidRecord, parse_feedback, parse_labels
from monitor.pipeline import Consumer, Events, SpanBatch
from monitor.server import HttpService, QuietHandler
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

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


def bearer_token(config: OtlpConfig) -> str | None:
    """The token named by ``auth_token_env``; fails at start-up if that variable is unset."""
    if config.auth_token_env is None:
        return None
    token = os.environ.get(config.auth_token_env)
    if not token:
        raise ValueError(
            f"collectors.otlp.auth_token_env names {config.auth_token_env!r}, "
            "but that environment variable is unset or empty"
        )
    return token


class OtlpHttpReceiver(HttpService):
    """The receiver; one instance per sidecar."""

    def __init__(self, config: OtlpConfig, pipeline: Consumer) -> None:
        self.config = config
        self.pipeline = pipeline
        self.token = bearer_token(config)
        super().__init__(config.http.host, config.http.port, _OtlpHandler)


class _OtlpHandler(QuietHandler):
    def do_POST(self) -> None:
        receiver: OtlpHttpReceiver = self.server.service  # type: ignore[attr-defined]
        content_type = self.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()
        route: dict[str, Callable[[OtlpHttpReceiver, bytes, str], bytes]] = {
            "/v1/traces": _export_traces,
            "/v1/labels": _post_labels,
            "/v1/feedback": _post_feedback,
        }
        handle = route.get(self.path.split("?", 1)[0])
        try:
            if handle is None:
                raise _Refused(404, "unknown path")
            self._authorize(receiver.token, receiver.config.max_request_bytes)
            body = self._read_body(receiver.config.max_request_bytes)
            response = handle(receiver, body, content_type)
        except _Refused as refusal:
            if refusal.status in _INVALID_BODY_STATUSES:
                receiver.pipeline.metrics.count_record("otlp", "invalid")
            self._send_status(refusal, content_type)
        else:
            self.send_body(200, response, PROTOBUF if content_type == PROTOBUF else JSON)

    def _authorize(self, token: str | None, limit: int) -> None:
        if token is None:
            return
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            self._discard_body(limit)
            raise _Refused(401, "missing or wrong bearer token", {"WWW-Authenticate": "Bearer"})

    def _discard_body(self, limit: int) -> None:
        """Read and drop a refused body, so that the client, still sending, sees our
        answer instead of a broken pipe; past a few times the limit, hang up instead."""
        length_header = self.headers.get("Content-Length", "")
        remaining = int(length_header) if length_header.isdigit() else -1
        if not 0 <= remaining <= _DISCARD_FACTOR * limit:
            self.close_connection = True
            return
        while remaining > 0:
            chunk = self.rfile.read(min(remaining, 1 << 16))
            if not chunk:
                break
            remaining -= len(chunk)

    def _read_body(self, limit: int) -> bytes:
        length_header = self.headers.get("Content-Length")
        if length_header is None or not length_header.isdigit():
            self.close_connection = True
            raise _Refused(411, "Content-Length is required")
        length = int(length_header)
        if length > limit:
            self._discard_body(limit)
            raise _Refused(413, f"body of {length} bytes exceeds max_request_bytes {limit}")
        body = self.rfile.read(length)
        if len(body) < length:
            self.close_connection = True
            raise _Refused(400, "body shorter than Content-Length")
        encoding = self.headers.get("Content-Encoding", "identity").strip().lower()
        if encoding == "gzip":
            return _gunzip(body, limit)
        if encoding not in ("identity", ""):
            raise _Refused(415, f"unsupported Content-Encoding {encoding!r}")
        return body

    def _send_status(self, refusal: _Refused, content_type: str) -> None:
        status = Status(code=_INVALID_ARGUMENT, message=str(refusal))
        if content_type == PROTOBUF:
            body, media = status.SerializeToString(), PROTOBUF
        else:
            body, media = orjson.dumps({"code": status.code, "message": status.message}), JSON
        self.send_body(refusal.status, body, media, refusal.headers)


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
