"""JSON records: ``rag-trace/1`` traces, gold-document labels and feedback events.

Parsed with pydantic models that forbid non-finite numbers and bound every
list, so a record either becomes a trusted value or an ``InvalidRecord`` whose
message names the offending field (it goes into the dead-letter header).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, TypeVar

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    model_validator,
)

from collectors.otlp import MAX_DOCUMENTS_PER_SPAN
from monitor.trace import Context, Feedback, Label, RagTrace, Source, Stage, Usage

MAX_LABELS_PER_BODY = 10_000

Id = Annotated[str, StringConstraints(min_length=1, max_length=256)]
DocIds = Annotated[list[Id], Field(max_length=MAX_DOCUMENTS_PER_SPAN)]
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0)]


class InvalidRecord(ValueError):
    """A record that cannot be used; the message is safe to log (it holds no text)."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


class _Context(_Record):
    doc_id: Id
    chunk_id: Id | None = None
    text: str | None = None
    score: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class _Usage(_Record):
    model: Id
    provider: str | None = None
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    embedding_tokens: Count = 0
    rerank_units: Count = 0


class _RagTraceRecord(_Record):
    schema_: Literal["rag-trace/1"] = Field(alias="schema")
    trace_id: Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{1,64}$")]
    time: datetime | None = None
    tenant: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    intent: str | None = None
    query: str | None = None
    answer: str | None = None
    contexts: Annotated[list[_Context], Field(max_length=MAX_DOCUMENTS_PER_SPAN)] = []
    retrieved: DocIds = []
    relevance_excluded: DocIds = []
    entitlement_excluded: DocIds = []
    filter_predicate: str | None = None
    stages: dict[Stage, Seconds] = {}
    usage: Annotated[list[_Usage], Field(max_length=64)] = []
    cost_usd: Annotated[float, Field(ge=0)] | None = None
    query_embedding: Annotated[list[float], Field(min_length=1, max_length=65_536)] | None = None
    probe_id: Id | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


def _validation_reason(exc: ValidationError) -> str:
    first = exc.errors()[0]
    path = ".".join(str(part) for part in first["loc"]) or "record"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{path}: {first['msg']}{more}"


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
    try:
        record = _RagTraceRecord.model_validate(document)
    except ValidationError as exc:
        raise InvalidRecord(_validation_reason(exc)) from exc
    time = record.time or datetime.now(UTC)
    return RagTrace(
        trace_id=record.trace_id.lower(),
        time=time if time.tzinfo else time.replace(tzinfo=UTC),
        source=source,
        tenant=record.tenant,
        user_id=record.user_id,
        session_id=record.session_id,
        intent=record.intent,
        query=record.query,
        answer=record.answer,
        contexts=tuple(
            Context(
                doc_id=c.doc_id,
                chunk_id=c.chunk_id,
                text=c.text,
                score=c.score,
                tenant=_tenant_of(c.metadata),
                metadata=c.metadata,
            )
            for c in record.contexts
        ),
        retrieved=tuple(record.retrieved),
        relevance_excluded=tuple(record.relevance_excluded),
        entitlement_excluded=tuple(record.entitlement_excluded),
        filter_predicate=record.filter_predicate,
        stages={str(stage): seconds for stage, seconds in record.stages.items()},
        usage=tuple(Usage(**u.model_dump()) for u in record.usage),
        cost_usd=record.cost_usd,
        query_embedding=tuple(record.query_embedding) if record.query_embedding else None,
        probe_id=record.probe_id,
        metadata=record.metadata,
    )


def _tenant_of(metadata: Mapping[str, Any]) -> str | None:
    tenant = metadata.get("tenant")
    return tenant if isinstance(tenant, str) else None


RecordT = TypeVar("RecordT", bound=_Record)


class _LabelRecord(_Record):
    trace_id: Id | None = None
    probe_id: Id | None = None
    gold_doc_ids: Annotated[list[Id], Field(min_length=1, max_length=MAX_DOCUMENTS_PER_SPAN)]

    @model_validator(mode="after")
    def _one_key(self) -> _LabelRecord:
        if (self.trace_id is None) == (self.probe_id is None):
            raise ValueError("exactly one of trace_id and probe_id is required")
        return self


class _FeedbackRecord(_Record):
    trace_id: Id
    kind: Literal["thumbs_up", "thumbs_down", "regenerate", "copy"]
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
        raise InvalidRecord(_validation_reason(exc)) from exc
