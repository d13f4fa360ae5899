"""Decoding of OTLP trace payloads (protobuf and OTLP/JSON) into plain ``Span`` values
(``collectors.spans.span``).

Both encodings end in the same ``Span`` so that assembly and the OpenInference
mapping see one shape. Validation happens here, per span: a span that cannot be
trusted is rejected (and reported through OTLP partial success), the rest of the
request is kept.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson
from google.protobuf.message import DecodeError, Message
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as ProtoSpan

from collectors.otlp.double_arrays import finite_doubles, json_finite_doubles
from collectors.spans.span import (
    DOCUMENT_KEYS,
    MAX_DOCUMENTS_PER_SPAN,
    FiniteFloats,
    Span,
    SpanEvent,
)


class PayloadError(ValueError):
    """The payload as a whole cannot be decoded; the reason is safe to log."""


@dataclass(slots=True)
class DecodedSpans:
    """The spans of one payload that passed validation, and what was rejected."""

    spans: list[Span] = field(default_factory=list)
    rejected: int = 0
    first_error: str | None = None

    def reject(self, reason: str) -> None:
        self.rejected += 1
        if self.first_error is None:
            self.first_error = reason

    def export_response(self) -> ExportTraceServiceResponse:
        """The OTLP answer: ``partial_success`` counts the refused spans, if any."""
        response = ExportTraceServiceResponse()
        if self.rejected:
            response.partial_success.rejected_spans = self.rejected
            response.partial_success.error_message = self.first_error or ""
        return response

    def json_response(self) -> bytes:
        """The same answer in OTLP/JSON."""
        if not self.rejected:
            return b"{}"
        partial = {"rejectedSpans": str(self.rejected), "errorMessage": self.first_error}
        return orjson.dumps({"partialSuccess": partial})


class SpanRejected(ValueError):
    pass


ProtoMessage = TypeVar("ProtoMessage", bound=Message)


def parse_proto(kind: type[ProtoMessage], body: bytes) -> ProtoMessage:
    """``body`` parsed as a ``kind`` message; undecodable, it raises PayloadError (a 400)."""
    try:
        message: ProtoMessage = kind.FromString(body)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise PayloadError(f"undecodable protobuf: {type(exc).__name__}") from exc
    return message


def parse_json_object(body: bytes) -> dict[str, Any]:
    """``body`` parsed as OTLP/JSON: an object, else PayloadError (a 400)."""
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise PayloadError(f"invalid JSON: {exc.msg}") from exc
    if not isinstance(document, dict):
        raise PayloadError("OTLP/JSON body must be an object")
    return document


def decode_otlp_proto(body: bytes) -> DecodedSpans:
    """Decode an OTLP ``ExportTraceServiceRequest`` in protobuf encoding (OTLP/HTTP, gRPC,
    Kafka); undecodable, it raises PayloadError."""
    request = parse_proto(ExportTraceServiceRequest, body)
    decoded = DecodedSpans()
    keep = decoded.spans.append  # bound once: this loop runs for every span
    for resource_spans in request.resource_spans:
        resource = _proto_attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            scope = scope_spans.scope.name
            for span in scope_spans.spans:
                try:
                    keep(_proto_span(span, resource, scope))
                except SpanRejected as exc:
                    decoded.reject(str(exc))
    return decoded


def _proto_span(span: ProtoSpan, resource: Mapping[str, Any], scope: str) -> Span:
    parent = span.parent_span_id
    return _checked_span(
        trace_id=_proto_id(span.trace_id, 16, "trace_id"),
        span_id=_proto_id(span.span_id, 8, "span_id"),
        parent=_proto_id(parent, 8, "parent_span_id") if parent else None,
        name=span.name,
        start_ns=span.start_time_unix_nano,
        end_ns=span.end_time_unix_nano,
        attributes=_proto_attributes(span.attributes),
        # Most spans have no events: no generator for them.
        events=tuple(
            SpanEvent(e.name, e.time_unix_nano, _proto_attributes(e.attributes))
            for e in span.events
        )
        if span.events
        else (),
        resource=resource,
        scope=scope,
    )


def _proto_id(raw: bytes, size: int, what: str) -> str:
    if len(raw) != size or not any(raw):
        raise SpanRejected(f"{what} must be {size} non-zero bytes")
    return raw.hex()


def _proto_attributes(pairs: Iterable[KeyValue]) -> dict[str, Any]:
    # Most values are non-empty strings, and most others non-zero numbers (scores, token
    # counts): taken here, without a call per attribute. A value is one of a oneof, so a
    # non-zero double or int is that kind; "", zeros and every other kind go to
    # _proto_value (a call and a oneof lookup cost about three reads).
    return {
        pair.key: (value := pair.value).string_value
        or value.double_value
        or value.int_value
        or _proto_value(value)
        for pair in pairs
    }


def _proto_value(value: AnyValue) -> Any:
    # Most values are non-empty strings: reading string_value first spares the
    # oneof lookup for them ("" falls through, as does every other kind).
    text = value.string_value
    if text:
        return text
    kind = value.WhichOneof("value")
    if kind == "array_value":
        array = value.array_value
        return finite_doubles(array) or [_proto_value(item) for item in array.values]
    if kind == "kvlist_value":
        return _proto_attributes(value.kvlist_value.values)
    return getattr(value, kind) if kind else None


def decode_otlp_json(body: bytes) -> DecodedSpans:
    """Decode an OTLP/JSON ``ExportTraceServiceRequest`` (hex ids, int64 as strings)."""
    document = parse_json_object(body)
    decoded = DecodedSpans()
    for resource_spans in _json_list(document, "resourceSpans", "resource_spans"):
        try:
            resource = _json_attributes(resource_spans.get("resource", {}).get("attributes", []))
        except (TypeError, ValueError, KeyError, AttributeError):
            resource = {}  # a bad resource costs its attributes, not its spans
        for scope_spans in _json_list(resource_spans, "scopeSpans", "scope_spans"):
            scope = _json_scope_name(scope_spans)
            for span in _json_list(scope_spans, "spans", "spans"):
                try:
                    decoded.spans.append(_json_span(span, resource, scope))
                except SpanRejected as exc:
                    decoded.reject(str(exc))
                except (TypeError, ValueError, KeyError, AttributeError) as exc:
                    decoded.reject(f"malformed span: {type(exc).__name__}")
    return decoded


def _json_list(node: Any, camel: str, snake: str) -> list[Any]:
    if not isinstance(node, dict):
        raise PayloadError(f"expected an object holding {camel!r}")
    items = node.get(camel, node.get(snake, []))
    if not isinstance(items, list):
        raise PayloadError(f"{camel!r} must be a list")
    return items


def _json_scope_name(scope_spans: Any) -> str:
    """The scope's name, or "" when it has none or a malformed one (it costs no span)."""
    scope = scope_spans.get("scope") if isinstance(scope_spans, dict) else None
    name = scope.get("name") if isinstance(scope, dict) else None
    return name if isinstance(name, str) else ""


def _json_span(span: dict[str, Any], resource: Mapping[str, Any], scope: str) -> Span:
    parent = span.get("parentSpanId", span.get("parent_span_id")) or None
    return _checked_span(
        trace_id=_json_id(span.get("traceId", span.get("trace_id")), 16, "traceId"),
        span_id=_json_id(span.get("spanId", span.get("span_id")), 8, "spanId"),
        parent=_json_id(parent, 8, "parentSpanId") if parent else None,
        name=_json_str(span.get("name", "")),
        start_ns=_json_int(span.get("startTimeUnixNano", span.get("start_time_unix_nano", 0))),
        end_ns=_json_int(span.get("endTimeUnixNano", span.get("end_time_unix_nano", 0))),
        attributes=_json_attributes(span.get("attributes", [])),
        events=tuple(
            SpanEvent(
                _json_str(event.get("name", "")),
                _json_int(event.get("timeUnixNano", event.get("time_unix_nano", 0))),
                _json_attributes(event.get("attributes", [])),
            )
            for event in span.get("events", [])
        ),
        resource=resource,
        scope=scope,
    )


def _json_id(raw: Any, size: int, what: str) -> str:
    if not isinstance(raw, str) or len(raw) != 2 * size:
        raise SpanRejected(f"{what} must be {2 * size} hex digits")
    try:
        value = bytes.fromhex(raw)
    except ValueError as exc:
        raise SpanRejected(f"{what} must be {2 * size} hex digits") from exc
    if not any(value):
        raise SpanRejected(f"{what} must not be all zero")
    return value.hex()


def _json_str(raw: Any) -> str:
    if not isinstance(raw, str):
        raise TypeError("expected a string")
    return raw


def _json_int(raw: Any) -> int:
    # OTLP/JSON writes int64 as decimal strings; plain numbers are accepted too.
    if isinstance(raw, bool) or not isinstance(raw, int | str):
        raise TypeError("expected an integer")
    return int(raw)


def _json_attributes(pairs: Any) -> dict[str, Any]:
    if not isinstance(pairs, list):
        raise TypeError("attributes must be a list")
    return {_json_str(pair["key"]): _json_value(pair.get("value", {})) for pair in pairs}


def _json_value(value: Any) -> Any:
    if not isinstance(value, dict):
        raise TypeError("an attribute value must be an object")
    if "stringValue" in value:
        return _json_str(value["stringValue"])
    if "boolValue" in value:
        if not isinstance(value["boolValue"], bool):
            raise TypeError("boolValue must be a boolean")
        return value["boolValue"]
    if "intValue" in value:
        return _json_int(value["intValue"])
    if "doubleValue" in value:
        raw = value["doubleValue"]
        if isinstance(raw, bool) or not isinstance(raw, int | float | str):
            raise TypeError("doubleValue must be a number")
        return float(raw)
    if "arrayValue" in value:
        items = value["arrayValue"].get("values", [])
        return json_finite_doubles(items) or [_json_value(item) for item in items]
    if "kvlistValue" in value:
        return _json_attributes(value["kvlistValue"].get("values", []))
    if "bytesValue" in value:
        try:
            return base64.b64decode(_json_str(value["bytesValue"]), validate=True)
        except binascii.Error as exc:
            raise TypeError("bytesValue must be base64") from exc
    return None


def _checked_span(
    *,
    trace_id: str,
    span_id: str,
    parent: str | None,
    name: str,
    start_ns: int,
    end_ns: int,
    attributes: dict[str, Any],
    events: tuple[SpanEvent, ...],
    resource: Mapping[str, Any],
    scope: str,
) -> Span:
    if start_ns <= 0 or end_ns < start_ns:
        raise SpanRejected("span times must satisfy 0 < start <= end")
    documents = 0
    for key, value in attributes.items():
        document = DOCUMENT_KEYS[key]
        if document is not None and document[1] >= documents:
            documents = document[1] + 1
        if type(value) is str:
            continue  # most values; spares the number checks below
        if isinstance(value, float) and not math.isfinite(value):
            raise SpanRejected(f"attribute {key} is not a finite number")
        if (
            isinstance(value, list)
            and type(value) is not FiniteFloats  # checked as a whole when decoded
            and any(isinstance(item, float) and not math.isfinite(item) for item in value)
        ):
            raise SpanRejected(f"attribute {key} holds a non-finite number")
    if documents > MAX_DOCUMENTS_PER_SPAN:
        raise SpanRejected(f"span lists {documents} documents, more than {MAX_DOCUMENTS_PER_SPAN}")
    return Span(
        trace_id, span_id, parent, name, start_ns, end_ns, attributes, events, resource, scope
    )
