"""Embedding vectors decoded as a whole: the same spans as element by element, the same
rejections."""

from __future__ import annotations

import math
import random

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from collectors.otlp.decode import decode_otlp_json, decode_otlp_proto
from collectors.otlp.double_arrays import MIN_ELEMENTS
from collectors.spans.span import FiniteFloats
from collectors.spans.text import vector
from tests.conftest import json_body, json_span, to_otlp_json
from tests.otel_traffic import MemoryExporter, tracer_for

VECTOR = "embedding.embeddings.0.embedding.vector"


def exported(*attribute_sets: dict[str, object]) -> bytes:
    """One real SDK span per attribute set, encoded by the OTLP exporter's encoder."""
    exporter = MemoryExporter()
    provider, tracer = tracer_for(exporter)
    for attributes in attribute_sets:
        with tracer.start_as_current_span("embed", attributes=attributes):  # type: ignore[arg-type]
            pass
    provider.shutdown()
    return encode_spans(exporter.spans).SerializeToString()


def numbers(count: int) -> list[float]:
    rng = random.Random(5)
    return [rng.gauss(0.0, 1.0) for _ in range(count)]


def test_a_long_vector_decodes_to_the_numbers_the_sdk_sent() -> None:
    """Edge values survive, and protobuf (whole) equals OTLP/JSON (element by element)."""
    sent = [*numbers(1536), 0.0, -0.0, 5e-324, 1.7976931348623157e308, -1e-300]
    body = exported({VECTOR: sent})
    [span] = decode_otlp_proto(body).spans
    got = span.attributes[VECTOR]
    assert type(got) is FiniteFloats
    assert got == sent
    assert math.copysign(1.0, got[1537]) == -1.0  # -0.0 keeps its sign
    [from_json] = decode_otlp_json(to_otlp_json(body)).spans
    assert from_json == span
    assert type(from_json.attributes[VECTOR]) is FiniteFloats
    assert vector(got) == tuple(sent)


def json_vector_span(values: list[object]) -> dict[str, object]:
    return json_span(attributes=[{"key": VECTOR, "value": {"arrayValue": {"values": values}}}])


def test_json_vectors_with_whole_numbers_strings_or_booleans_decode_as_before() -> None:
    """A JSON encoder may write 0.0 as 0 (a whole-array float), a double as "NaN" (the span
    is rejected as before) or a boolean (malformed, as before)."""
    whole = [{"doubleValue": 0}, *({"doubleValue": x} for x in numbers(40))]
    [span] = decode_otlp_json(json_body(json_vector_span(whole))).spans
    assert type(span.attributes[VECTOR]) is FiniteFloats
    assert span.attributes[VECTOR][0] == 0.0
    assert type(span.attributes[VECTOR][0]) is float
    for bad, reason in (("NaN", "non-finite"), (True, "malformed")):
        values = [*({"doubleValue": x} for x in numbers(40)), {"doubleValue": bad}]
        decoded = decode_otlp_json(json_body(json_vector_span(values)))
        assert decoded.rejected == 1
        assert reason in (decoded.first_error or "")
    mixed = [*({"doubleValue": x} for x in numbers(40)), {"stringValue": "x", "doubleValue": 1.0}]
    [span] = decode_otlp_json(json_body(json_vector_span(mixed))).spans
    assert span.attributes[VECTOR][-1] == "x"  # stringValue first, as element by element


def test_a_non_finite_number_in_a_long_vector_rejects_its_span_as_before() -> None:
    """NaN or infinity anywhere rejects the span with the element-wise reason; the neighbour
    span is kept."""
    for bad in (math.nan, math.inf, -math.inf):
        sent = numbers(400)
        sent[217] = bad
        decoded = decode_otlp_proto(exported({VECTOR: sent}, {VECTOR: numbers(400)}))
        assert decoded.rejected == 1
        assert decoded.first_error == f"attribute {VECTOR} holds a non-finite number"
        assert [type(s.attributes[VECTOR]) for s in decoded.spans] == [FiniteFloats]


def test_arrays_of_other_kinds_decode_element_by_element() -> None:
    """Integers, strings, booleans and short vectors keep their Python types."""
    ints = list(range(MIN_ELEMENTS * 4))
    texts = [f"t{i}" for i in range(MIN_ELEMENTS * 2)]
    flags = [True, False] * MIN_ELEMENTS
    short = numbers(MIN_ELEMENTS - 1)
    [span] = decode_otlp_proto(
        exported({"ints": ints, "texts": texts, "flags": flags, "short": short})
    ).spans
    assert span.attributes["ints"] == ints
    assert all(type(i) is int for i in span.attributes["ints"])
    assert span.attributes["texts"] == texts
    assert span.attributes["flags"] == flags
    assert all(type(f) is bool for f in span.attributes["flags"])
    assert span.attributes["short"] == short
    assert all(type(span.attributes[k]) is list for k in ("ints", "texts", "flags", "short"))
