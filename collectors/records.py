"""JSON records: ``rag-trace/1`` traces, gold-document labels and feedback events.

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
from typing import Annotated, Any, Literal, TypeVar

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from monitor.trace import MAX_DOCUMENTS, Feedback, FeedbackKind, Id, Label, RagTrace, Source

MAX_LABELS_PER_BODY = 10_000
# Set by the collector, not by the record: a record's own value is ignored.
_NOT_FROM_RECORDS = frozenset({"source", "root_span_id"})
_RAG_TRACE = TypeAdapter(RagTrace)


class InvalidRecord(ValueError):
    """A record that cannot be used; the message is safe to log (it holds no text)."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class _RagTraceRecord(_Record):
    """The record's envelope; ``RagTrace`` itself validates the rest."""

    schema_: Literal["rag-trace/1"] = Field(alias="schema")


def _validation_reason(errors: list[ErrorDetails]) -> str:
    first = errors[0]
    path = ".".join(str(part) for part in first["loc"]) or "record"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{path}: {first['msg']}{more}"


def _errors(validate: Callable[[Any], object], value: Any) -> list[ErrorDetails]:
    try:
        validate(value)
    except ValidationError as exc:
        return exc.errors()
    return []


def _load_json(body: bytes) -> Any:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRecord(f"invalid JSON: {exc.msg}") from exc


def is_rag_trace_json(document: Any) -> bool:
    return isinstance(document, dict) and document.get("schema") == "rag-trace/1"


def parse_rag_trace(body: bytes, source: Source) -> RagTrace:
    """Parse one ``rag-trace/1`` record."""
    return rag_trace_from_document(_load_json(body), source)


def rag_trace_from_document(document: Any, source: Source) -> RagTrace:
    """Validate one decoded ``rag-trace/1`` document into a ``RagTrace`` from ``source``."""
    errors = _errors(_RagTraceRecord.model_validate, document)
    if not isinstance(document, dict):
        raise InvalidRecord(_validation_reason(errors))
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
        raise InvalidRecord(_validation_reason(errors + exc.errors())) from exc
    if errors:
        raise InvalidRecord(_validation_reason(errors))
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


RecordT = TypeVar("RecordT", bound=_Record)


class _LabelRecord(_Record):
    trace_id: Id | None = None
    probe_id: Id | None = None
    gold_doc_ids: Annotated[list[Id], Field(min_length=1, max_length=MAX_DOCUMENTS)]

    @model_validator(mode="after")
    def _one_key(self) -> _LabelRecord:
        if (self.trace_id is None) == (self.probe_id is None):
            raise ValueError("exactly one of trace_id and probe_id is required")
        return self


class _FeedbackRecord(_Record):
    trace_id: Id
    kind: FeedbackKind
    reason: Annotated[str, StringConstraints(max_length=256)] | None = None
    session_id: Id | None = None


def parse_labels(body: bytes) -> list[Label]:
    """Parse a label record: one JSON object or a list of them."""
    return [
        Label(tuple(r.gold_doc_ids), trace_id=r.trace_id, probe_id=r.probe_id)
        for r in _parse_many(body, _LabelRecord)
    ]


def parse_feedback(body: bytes) -> list[Feedback]:
    """Parse a feedback record: one JSON object or a list of them."""
    return [
        Feedback(r.trace_id, r.kind, reason=r.reason, session_id=r.session_id)
        for r in _parse_many(body, _FeedbackRecord)
    ]


def _parse_many(body: bytes, model: type[RecordT]) -> list[RecordT]:
    document = _load_json(body)
    items = document if isinstance(document, list) else [document]
    if not items or len(items) > MAX_LABELS_PER_BODY:
        raise InvalidRecord(f"expected 1 to {MAX_LABELS_PER_BODY} records")
    try:
        return [model.model_validate(item) for item in items]
    except ValidationError as exc:
        raise InvalidRecord(_validation_reason(exc.errors())) from exc
