"""Arrays of doubles in OTLP (embedding vectors), decoded as a whole.

An embedding span carries its vector as an ``ArrayValue`` of one ``AnyValue``
per number. Read one element at a time through the protobuf runtime, a
1,536-dimension vector cost about 0.5 ms, more than the rest of its trace
(tests/perf/bench_vectors.py). The runtime re-encodes the array
in C; when every element has the one layout a double has (field 1, 9 bytes:
``double_value``, 8 little-endian bytes), numpy reads all the numbers at once
and checks them finite. Anything else (another kind, an unknown field, a
non-finite number) returns None, and the element-wise path decides as before,
so what is accepted, rejected and why does not change. OTLP/JSON arrays get the
same treatment when every element is a plain ``{"doubleValue": number}``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from opentelemetry.proto.common.v1.common_pb2 import ArrayValue

from collectors.spans.span import FiniteFloats

# Below this many elements the element-wise path is as fast.
MIN_ELEMENTS = 16
# ArrayValue.values (field 1, length-delimited), 9 bytes long, holding
# AnyValue.double_value (field 4, 64-bit).
_HEAD = np.array([(1 << 3) | 2, 9, (4 << 3) | 1], dtype=np.uint8)
_ELEMENT = 3 + 8
# What orjson makes of a JSON number (it refuses infinities and integers past 64 bits).
_JSON_NUMBERS = frozenset({float, int})


def finite_doubles(array: ArrayValue) -> FiniteFloats | None:
    """The array's numbers when all are finite doubles in the usual encoding, else None."""
    count = len(array.values)
    if count < MIN_ELEMENTS:
        return None
    raw = array.SerializeToString()
    if len(raw) != count * _ELEMENT:
        return None
    elements = np.frombuffer(raw, dtype=np.uint8).reshape(count, _ELEMENT)
    if not (elements[:, :3] == _HEAD).all():
        return None
    numbers = elements[:, 3:].copy().view("<f8").ravel()
    if not np.isfinite(numbers).all():
        return None
    return FiniteFloats(numbers.tolist())


def json_finite_doubles(items: Any) -> FiniteFloats | None:
    """OTLP/JSON ``arrayValue.values`` when all are finite ``{"doubleValue": number}``, else
    None (strings such as "NaN", booleans and other kinds take the element-wise path)."""
    if not isinstance(items, list) or len(items) < MIN_ELEMENTS:
        return None
    try:
        numbers = [item["doubleValue"] for item in items if len(item) == 1]
    except (KeyError, TypeError):
        return None
    if len(numbers) != len(items) or not {type(n) for n in numbers} <= _JSON_NUMBERS:
        return None
    array = np.array(numbers, dtype=np.float64)
    if not np.isfinite(array).all():
        return None
    return FiniteFloats(array.tolist())
