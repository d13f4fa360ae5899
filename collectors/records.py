"""JSON ``rag-trace/1`` records (labels and feedback: ``monitor/events.py``).

Parsed with pydantic (a ``rag-trace/1`` record through a ``TypeAdapter`` over
the ``RagTrace`` dataclass, whose fields declare the bounds), forbidding
non-finite numbers and bounding every list, so a record either becomes a
trusted value or an ``InvalidRecord`` whose message names the offending field
(it goes into the dead-letter header).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import Field, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from monitor.events import InvalidRecord, Record, load_json, validation_reason
from monitor.trace import RagTrace, Source

# Set by the collector, not by the record: a record's own value is ignored.
_NOT_FROM_RECORDS = frozenset({"source", "root_span_id"})
_RAG_TRACE = TypeAdapter(RagTrace)


class _RagTraceRecord(Record):
    """The record's envelope; ``RagTrace`` itself validates the rest."""

    schema_: Literal["rag-trace/1"] = Field(alias="schema")


def _errors(validate: Callable[[Any], object], value: Any) -> list[ErrorDetails]:
    try:
        validate(value)
    except ValidationError as exc:
        return exc.errors()
    return []


def is_rag_trace_json(document: Any) -> bool:
    return isinstance(document, dict) and document.get("schema") == "rag-trace/1"


def parse_rag_trace(body: bytes, source: Source) -> RagTrace:
    """Parse one ``rag-trace/1`` record."""
    return rag_trace_from_document(load_json(body), source)


def rag_trace_from_document(document: Any, source: Source) -> RagTrace:
    """Validate one decoded ``rag-trace/1`` document into a ``RagTrace`` from ``source``."""
    errors = _errors(_RagTraceRecord.model_validate, document)
    if not isinstance(document, dict):
        raise InvalidRecord(validation_reason(errors))
    fields = {k: v for k, v in document.items() if k not in _NOT_FROM_RECORDS}
    fields["source"] = source
    if fields.get("time") is None:
        fields["time"] = datetime.now(UTC)
    contexts = fields.get("contexts")
    if isinstance(contexts, list):  # a context's tenant comes from its metadata only
        fields["contexts"] = [_without_tenant(c) for c in contexts]
    try:
        trace = _RAG_TRACE.validate_python(fields)
    except ValidationError as exc:
        raise InvalidRecord(validation_reason(errors + exc.errors())) from exc
    if errors:
        raise InvalidRecord(validation_reason(errors))
    return replace(
        trace, contexts=tuple(replace(c, tenant=_tenant_of(c.metadata)) for c in trace.contexts)
    )


def _without_tenant(context: Any) -> Any:
    if isinstance(context, dict):
        return {k: v for k, v in context.items() if k != "tenant"}
    return context


def _tenant_of(metadata: Mapping[str, Any]) -> str | None:
    tenant = metadata.get("tenant")
    return tenant if isinstance(tenant, str) else None
