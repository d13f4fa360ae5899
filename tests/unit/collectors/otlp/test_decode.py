"""OTLP decoding: protobuf and OTLP/JSON give the same spans; bad input is refused, never raised."""

from __future__ import annotations

import contextlib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collectors.otlp.decode import PayloadError, decode_otlp_json, decode_otlp_proto
from collectors.spans.span import MAX_DOCUMENTS_PER_SPAN
from tests.conftest import json_body, json_span, many_documents, sdk_request, to_otlp_json


def test_protobuf_and_json_decode_to_the_same_spans() -> None:
    """The two OTLP encodings of one SDK export give equal Span values."""
    body = sdk_request()
    from_proto = decode_otlp_proto(body)
    from_json = decode_otlp_json(to_otlp_json(body))
    assert from_proto.rejected == from_json.rejected == 0
    assert len(from_proto.spans) == 5
    assert from_proto.spans == from_json.spans
    root = next(s for s in from_proto.spans if s.parent_span_id is None)
    assert root.attributes["openinference.span.kind"] == "CHAIN"
    embed = next(s for s in from_proto.spans if s.name == "embed")
    assert embed.attributes["embedding.embeddings.0.embedding.vector"] == [0.1, 0.2, 0.3]


def test_json_int64_strings_and_value_kinds() -> None:
    """OTLP/JSON int64 strings, arrays, kvlists, bools, doubles and bytes decode to Python."""
    attributes = [
        {"key": "i", "value": {"intValue": "9007199254740993"}},
        {"key": "d", "value": {"doubleValue": 0.5}},
        {"key": "b", "value": {"boolValue": True}},
        {"key": "a", "value": {"arrayValue": {"values": [{"stringValue": "x"}, {"intValue": 1}]}}},
        {
            "key": "k",
            "value": {"kvlistValue": {"values": [{"key": "z", "value": {"stringValue": "y"}}]}},
        },
        {"key": "by", "value": {"bytesValue": "AAE="}},
    ]
    [span] = decode_otlp_json(json_body(json_span(attributes=attributes))).spans
    assert span.attributes == {
        "i": 9007199254740993, "d": 0.5, "b": True, "a": ["x", 1], "k": {"z": "y"}, "by": b"\x00\x01",
    }  # fmt: skip
    assert span.duration_s == 1.0


@pytest.mark.parametrize(
    ("span", "reason"),
    [
        (json_span(traceId="00" * 16), "traceId"),
        (json_span(traceId="abc"), "traceId"),
        (json_span(spanId="zz" * 8), "spanId"),
        (json_span(endTimeUnixNano="1"), "start <= end"),
        (json_span(startTimeUnixNano="0"), "start <= end"),
        (json_span(attributes=[{"key": "x", "value": {"doubleValue": "NaN"}}]), "finite"),
        (json_span(attributes=[{"key": "x", "value": {"intValue": {"no": 1}}}]), "malformed"),
        (json_span(attributes=many_documents(MAX_DOCUMENTS_PER_SPAN + 1)), "documents"),
        (json_span(name=7), "malformed"),
    ],
    ids=["zero-trace-id", "short-id", "non-hex", "negative-duration", "no-start", "nan",
         "wrong-type", "10k-documents", "name-type"],
)  # fmt: skip
def test_bad_spans_are_rejected_and_good_ones_kept(span: dict[str, object], reason: str) -> None:
    """A bad span is counted as rejected with a reason; its neighbour survives."""
    decoded = decode_otlp_json(json_body(span, json_span(spanId="aaaaaaaaaaaaaaaa")))
    assert decoded.rejected == 1
    assert len(decoded.spans) == 1
    assert decoded.first_error is not None
    assert reason in decoded.first_error


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"{",
        b"[1]",
        b'{"resourceSpans": 5}',
        b'{"resourceSpans": [{"scopeSpans": [7]}]}',
        b"\xff\xfe",
    ],
    ids=["empty", "truncated", "array", "wrong-type", "nested-wrong-type", "invalid-utf8"],
)
def test_undecodable_json_raises_payload_error(body: bytes) -> None:
    """A body that is not an OTLP/JSON request raises PayloadError (a 400)."""
    if body == b"":
        with pytest.raises(PayloadError):
            decode_otlp_json(body)
        return
    with pytest.raises(PayloadError):
        decode_otlp_json(body)


def test_truncated_and_garbage_protobuf_raise_payload_error() -> None:
    """Cut-off protobuf and random bytes are PayloadError, not a crash."""
    body = sdk_request()
    with pytest.raises(PayloadError):
        decode_otlp_proto(body[: len(body) // 2])
    with pytest.raises(PayloadError):
        decode_otlp_proto(b"\xff\xff\xff\xff garbage")


def test_invalid_utf8_in_a_protobuf_string_is_refused() -> None:
    """A protobuf string field holding invalid UTF-8 is a PayloadError."""
    body = sdk_request()
    marker = b"what is the refund policy?"
    assert marker in body
    with pytest.raises(PayloadError):
        decode_otlp_proto(body.replace(marker, b"\xff" * len(marker)))


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_fuzz_protobuf_decoder_never_raises_other_errors(body: bytes) -> None:
    """Arbitrary bytes either decode or raise PayloadError."""
    with contextlib.suppress(PayloadError):
        decode_otlp_proto(body)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(
        st.sampled_from(["traceId", "spanId", "parentSpanId", "name", "startTimeUnixNano",
                         "endTimeUnixNano", "attributes", "events"]),
        json_values,
    )
)  # fmt: skip
def test_fuzz_json_decoder_rejects_spans_without_raising(span: dict[str, object]) -> None:
    """Any JSON span shape decodes or is rejected; only whole-body errors raise PayloadError."""
    try:
        decoded = decode_otlp_json(json_body(json_span(**span)))
    except PayloadError:
        return
    assert len(decoded.spans) + decoded.rejected == 1


@settings(max_examples=200)
@given(json_values)
def test_fuzz_json_decoder_on_any_document(document: object) -> None:
    """Any JSON document decodes or raises PayloadError."""
    with contextlib.suppress(PayloadError):
        decode_otlp_json(orjson.dumps(document))


def test_odd_document_indexes_are_refused_or_ignored_not_raised() -> None:
    """A superscript "index" is an ordinary attribute; a 5,000-digit one is over the limit."""
    name = "retrieval.documents.².document.id"
    attributes = [{"key": name, "value": {"stringValue": "d1"}}]
    [span] = decode_otlp_json(json_body(json_span(attributes=attributes))).spans
    assert span.attributes[name] == "d1"
    huge = [{"key": f"retrieval.documents.{'9' * 5000}.document.id", "value": {"stringValue": "d"}}]
    decoded = decode_otlp_json(json_body(json_span(attributes=huge)))
    assert decoded.rejected == 1
    assert "documents" in (decoded.first_error or "")
