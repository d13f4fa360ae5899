"""The span every transport decodes into, and the span attribute names decoding and the
mapping both read.

Decoding (``collectors.otlp.decode``) builds a ``Span`` from either OTLP encoding, so that
the assembly and the mapping see one shape whatever the transport.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from monitor.contract.trace import MAX_DOCUMENTS


class FiniteFloats(list[float]):
    """Finite floats decoded and checked as a whole: validation and the mapping need not
    look at each number again."""


# A retriever span listing more documents than this is refused (see MAX_DOCUMENTS).
MAX_DOCUMENTS_PER_SPAN = MAX_DOCUMENTS
RETRIEVED_DOCUMENTS = "retrieval.documents."
RERANKED_DOCUMENTS = "reranker.output_documents."
_DOCUMENT_PREFIXES = (RETRIEVED_DOCUMENTS, RERANKED_DOCUMENTS)


def _split_document_key(key: str) -> tuple[str, int, str] | None:
    prefix = next((p for p in _DOCUMENT_PREFIXES if key.startswith(p)), None)
    if prefix is None:
        return None
    index, _, rest = key[len(prefix) :].partition(".")
    # isdecimal, not isdigit: int() refuses digits such as "²" that isdigit accepts.
    if not index.isdecimal():
        return None
    field = rest[len("document.") :] if rest.startswith("document.") else ""
    # Past 9 digits the index is over any document limit; int() would also refuse
    # a decimal of more than 4,300 digits.
    return prefix, int(index) if len(index) <= 9 else _HUGE_INDEX, field


_HUGE_INDEX = 10**9


class _DocumentKeys(dict[str, tuple[str, int, str] | None]):
    """Attribute name -> (prefix, index, field) of a document attribute, else None.

    ``retrieval.documents.3.document.id`` gives ``("retrieval.documents.", 3, "id")``;
    the field is ``""`` when the name goes on otherwise (``retrieval.documents.3.x``).
    Decoding and the OpenInference mapping look up every attribute name of
    every span, and a service uses the same few names again and again, so the
    answers are remembered: a hit is one dict lookup. Bounded: long names are
    not kept and a full table starts afresh, so names sent on purpose cannot
    pin memory.
    """

    def __missing__(self, key: str) -> tuple[str, int, str] | None:
        document = _split_document_key(key)
        if len(key) <= _MAX_KEPT_NAME:
            if len(self) >= _MAX_KEPT_NAMES:
                self.clear()
            self[key] = document
        return document


_MAX_KEPT_NAME = 128
_MAX_KEPT_NAMES = 4096
DOCUMENT_KEYS = _DocumentKeys()


@dataclass(slots=True, unsafe_hash=True)  # per request: see monitor/contract/trace.py
class SpanEvent:
    name: str
    time_ns: int
    attributes: Mapping[str, Any]


@dataclass(slots=True, unsafe_hash=True)  # per request: see monitor/contract/trace.py
class Span:
    """One decoded span: read-only, as the trace it becomes."""

    trace_id: str  # 32 lowercase hex digits
    span_id: str  # 16 lowercase hex digits
    parent_span_id: str | None
    name: str
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    events: tuple[SpanEvent, ...] = ()
    # The resource's attributes (service.name, ...): one mapping shared by its spans.
    resource: Mapping[str, Any] = field(default_factory=dict)
    # The instrumentation scope's name (``openinference.instrumentation.langchain``, ...):
    # which instrumentation wrote the span, for field coverage per instrumentation.
    scope: str = ""

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9
