"""Label and feedback records: JSON bodies parsed into the core's ``Label`` and ``Feedback``.

The event contract is the core's (``monitor/contract/trace.py``), so its parsing is too:
collectors read these records from their inputs and the filter-exclusion
detector reads its golden-set file with the same grammar. A record either
becomes a trusted value or an ``InvalidRecord`` whose message names the
offending field.
"""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import ErrorDetails

from monitor.contract.trace import (
    MAX_DOCUMENTS,
    MAX_DWELL_SECONDS,
    Feedback,
    FeedbackKind,
    FeedbackReason,
    Id,
    Label,
)

MAX_LABELS_PER_BODY = 10_000


class InvalidRecord(ValueError):
    """A record that cannot be used; the message is safe to log (it holds no text)."""


class Record(BaseModel):
    """Base of the record envelopes: unknown keys ignored, no NaN or infinity."""

    model_config = ConfigDict(extra="ignore", frozen=True, allow_inf_nan=False)


def validation_reason(errors: list[ErrorDetails]) -> str:
    """The first error with its field path, and how many more there were."""
    first = errors[0]
    path = ".".join(str(part) for part in first["loc"]) or "record"
    more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{path}: {first['msg']}{more}"


def load_json(body: bytes) -> Any:
    """Decode ``body``; ``InvalidRecord`` if it is not JSON."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRecord(f"invalid JSON: {exc.msg}") from exc


RecordT = TypeVar("RecordT", bound=Record)


class _LabelRecord(Record):
    trace_id: Id | None = None
    probe_id: Id | None = None
    gold_doc_ids: Annotated[list[Id], Field(min_length=1, max_length=MAX_DOCUMENTS)]

    @model_validator(mode="after")
    def _one_key(self) -> _LabelRecord:
        if (self.trace_id is None) == (self.probe_id is None):
            raise ValueError("exactly one of trace_id and probe_id is required")
        return self


class _FeedbackRecord(Record):
    trace_id: Id
    kind: FeedbackKind
    reason: FeedbackReason | None = None
    session_id: Id | None = None
    doc_id: Id | None = None
    # strict: JSON true is not one second
    dwell_seconds: Annotated[float, Field(strict=True, ge=0, le=MAX_DWELL_SECONDS)] | None = None

    @model_validator(mode="after")
    def _fields_of_kind(self) -> _FeedbackRecord:
        # Each optional field belongs to one kind; elsewhere it is a client's mistake,
        # refused rather than silently dropped.
        for name, kind in _FIELD_KIND.items():
            present = getattr(self, name) is not None
            if present and self.kind != kind:
                raise ValueError(f"{name} is only allowed with kind {kind}")
            if not present and self.kind == kind and name != "reason":
                raise ValueError(f"{name} is required with kind {kind}")
        return self


# The field each kind carries: a thumbs-down reason is optional, the others required.
_FIELD_KIND: dict[str, FeedbackKind] = {
    "reason": "thumbs_down",
    "doc_id": "click",
    "dwell_seconds": "dwell",
}


def parse_labels(body: bytes) -> list[Label]:
    """Parse a label record: one JSON object or a list of them."""
    return [
        Label(tuple(r.gold_doc_ids), trace_id=r.trace_id, probe_id=r.probe_id)
        for r in _parse_many(body, _LabelRecord)
    ]


def parse_feedback(body: bytes) -> list[Feedback]:
    """Parse a feedback record: one JSON object or a list of them."""
    return [
        Feedback(
            r.trace_id,
            r.kind,
            reason=r.reason,
            session_id=r.session_id,
            doc_id=r.doc_id,
            dwell_seconds=r.dwell_seconds,
        )
        for r in _parse_many(body, _FeedbackRecord)
    ]


def _parse_many(body: bytes, model: type[RecordT]) -> list[RecordT]:
    document = load_json(body)
    items = document if isinstance(document, list) else [document]
    if not items or len(items) > MAX_LABELS_PER_BODY:
        raise InvalidRecord(f"expected 1 to {MAX_LABELS_PER_BODY} records")
    records = []
    for index, item in enumerate(items):
        try:
            records.append(model.model_validate(item))
        except ValidationError as exc:
            # In a list, the path starts at the record's index, so a client finds it.
            errors = exc.errors()
            if isinstance(document, list):
                errors = [{**e, "loc": (index, *e["loc"])} for e in errors]
            raise InvalidRecord(validation_reason(errors)) from exc
    return records
