"""The one contract between collectors and detectors: ``RagTrace`` and the events.

Collectors own parsing and validation; everything here is already typed and
bounded, so detectors can trust it. The bounds are declared on the fields
(``Annotated``): code ignores them, and a pydantic ``TypeAdapter`` over these
dataclasses validates ``rag-trace/1`` records with them (``collectors/kafka/records.py``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Annotated, Any, Literal, get_args

from pydantic import AfterValidator, AllowInfNan, Field, GetCoreSchemaHandler, StringConstraints
from pydantic_core import CoreSchema, core_schema

Stage = Literal["embed", "retrieve", "rerank", "generate", "ttft", "total"]
STAGES: tuple[Stage, ...] = get_args(Stage)
Source = Literal["otlp", "kafka"]
# The feedback kinds of the method (Part 10): explicit thumbs with an optional reason,
# and implicit events that stay candidate signals until reviews validate them.
FeedbackKind = Literal[
    "thumbs_up",
    "thumbs_down",
    "regenerate",
    "copy",
    "click",  # on a cited document (``doc_id``)
    "dwell",  # time on the answer (``dwell_seconds``)
    "share",
    "export",
    "re_ask",  # the user asked again
]
FEEDBACK_KINDS: tuple[FeedbackKind, ...] = get_args(FeedbackKind)
# A closed set, so a metric label stays bounded; a thumbs-down reason outside it is refused.
FeedbackReason = Literal["wrong", "incomplete", "off_topic", "harmful", "slow", "other"]
FEEDBACK_REASONS: tuple[FeedbackReason, ...] = get_args(FeedbackReason)
MAX_DWELL_SECONDS = 86_400.0  # a dwell longer than a day is a client's clock, not reading
# More documents than this on one request are refused, in a span or a record: no
# real retriever hands thousands of chunks to a generator, and holding them
# would let one request take the memory meant for many traces.
MAX_DOCUMENTS = 1000
MAX_TOOL_CALLS = 256  # of one request, kept in call order
# Release attributes become metric label values (detectors/release): bounded, never free text.
MAX_RELEASE_ATTRIBUTE_LENGTH = 128


@dataclass(frozen=True, slots=True)
class _JsonArray:
    """A tuple field read from a JSON array: bounded, and the messages say "list"."""

    min_length: int | None = None
    max_length: int | None = None

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        item = get_args(source)[0]  # source is tuple[item, ...]
        items = core_schema.list_schema(
            handler.generate_schema(item), min_length=self.min_length, max_length=self.max_length
        )
        return core_schema.no_info_after_validator_function(tuple, items)


@dataclass(frozen=True, slots=True)
class _ValidatedAs:
    """A field typed loosely for code but validated as ``wire`` in records."""

    wire: Any

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return handler.generate_schema(self.wire)


def _utc_unless_zoned(time: datetime) -> datetime:
    return time if time.tzinfo else time.replace(tzinfo=UTC)


MAX_ID_LENGTH = 256
Id = Annotated[str, StringConstraints(min_length=1, max_length=MAX_ID_LENGTH)]
Finite = Annotated[float, AllowInfNan(False)]
Count = Annotated[int, Field(ge=0)]
DocIds = Annotated[tuple[Id, ...], _JsonArray(max_length=MAX_DOCUMENTS)]
TraceId = Annotated[str, StringConstraints(pattern=r"^[0-9a-fA-F]{1,64}$", to_lower=True)]
StageName = Annotated[str, _ValidatedAs(Stage)]
Seconds = Annotated[Finite, Field(ge=0)]
ReleaseAttribute = Annotated[
    str, StringConstraints(min_length=1, max_length=MAX_RELEASE_ATTRIBUTE_LENGTH)
]


def _empty() -> Mapping[str, Any]:
    return MappingProxyType({})


# Per request: the values made for every request on the intake path (RagTrace, Context, Usage,
# EvaluationResult, and the collectors' Span) are plain slots dataclasses, hashable as
# frozen ones are, not frozen: a frozen one sets each field through object.__setattr__,
# which made a RagTrace 5 times as costly to build (about 9 against 1.8 us) and added
# about a tenth to the sidecar's CPU per span (docs, Performance). Detectors share them
# and treat them as read-only (dataclasses.replace makes a changed copy);
# tests/unit/runtime/test_pipeline.py holds the built-in detectors to that.
@dataclass(slots=True, unsafe_hash=True)  # per request: see above
class EvaluationResult:
    """One evaluator's verdict on a request: the OpenTelemetry ``gen_ai.evaluation.result``
    event, or an OpenInference annotation or EVALUATOR span (detectors/evaluations).

    Inside a ``RagTrace`` it belongs to that trace; sent on its own (a log record, a span
    that arrived after its request) it is an event naming its request by ``trace_id`` or
    ``response_id``. ``name`` is None when the producer sent none, and ``score`` None when
    it sent none or a non-finite one: the detector counts both as errors, never drops them.
    ``explanation`` may quote production text: it is kept for nothing but the record.
    """

    name: Id | None = None
    score: Finite | None = None
    label: Annotated[str, StringConstraints(max_length=256)] | None = None
    explanation: str | None = None
    error_type: Annotated[str, StringConstraints(max_length=256)] | None = None
    response_id: Id | None = None
    trace_id: TraceId | None = None
    span_id: Id | None = None  # the evaluated span, when the producer names it


@dataclass(slots=True, unsafe_hash=True)  # per request: see above
class ToolCall:
    """One tool call of an agent's request, in call order (collectors/spans/tools.py): the
    tool's name, whether it was a retrieval step (its result held documents, or
    ``mapping.retrieval_tools`` names it), the arguments it was called with (a retrieval's
    are the agent's own query, never the question judged) and how many documents it gave."""

    name: Id
    retrieval: bool = False
    arguments: str | None = None
    documents: Count = 0


@dataclass(slots=True, unsafe_hash=True)  # per request: see above
class Context:
    """A chunk supplied to the generator."""

    doc_id: Id
    chunk_id: Id | None = None
    text: str | None = None
    score: Finite | None = None
    tenant: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    # True when the producer gave the document no id and the mapping derived one from its
    # text: it is still evidence the generator saw, but no label or gold set can name it.
    id_derived: bool = False


@dataclass(slots=True, unsafe_hash=True)  # per request: see above
class Usage:
    """Tokens (and rerank units) one model used for the request."""

    model: Id
    provider: str | None = None
    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    embedding_tokens: Count = 0
    rerank_units: Count = 0


@dataclass(slots=True, unsafe_hash=True)  # per request: see above
class RagTrace:
    """One normalized RAG request (README, "Sending traces")."""

    trace_id: TraceId
    time: Annotated[datetime, AfterValidator(_utc_unless_zoned)]
    source: Source
    root_span_id: str | None = None
    tenant: str | None = None
    user_id: str | None = None
    session_id: str | None = None
    intent: str | None = None
    query: str | None = None
    answer: str | None = None
    contexts: Annotated[tuple[Context, ...], _JsonArray(max_length=MAX_DOCUMENTS)] = ()
    retrieved: DocIds = ()
    relevance_excluded: DocIds = ()
    entitlement_excluded: DocIds = ()
    filter_predicate: str | None = None
    stages: Mapping[StageName, Seconds] = field(default_factory=_empty)
    usage: Annotated[tuple[Usage, ...], _JsonArray(max_length=64)] = ()
    cost_usd: Annotated[Finite, Field(ge=0)] | None = None
    query_embedding: (
        Annotated[tuple[Finite, ...], _JsonArray(min_length=1, max_length=65_536)] | None
    ) = None
    probe_id: Id | None = None
    metadata: Mapping[str, Any] = field(default_factory=_empty)
    # The OTel resource attributes service.name, service.version, deployment.environment.
    service_name: ReleaseAttribute | None = None
    service_version: ReleaseAttribute | None = None
    deployment_environment: ReleaseAttribute | None = None
    # Shadow comparison (detectors/shadow): the pipeline variant that served or shadowed the
    # request (``rag.variant``; detectors bound it to a configured allow-list) and the id a
    # production request shares with its shadow twin (``rag.pair_id``).
    variant: ReleaseAttribute | None = None
    pair_id: Id | None = None
    # The representation of ``query_embedding``: the embedding model that produced it. Vectors
    # of different models share neither a basis nor, always, a dimension (detectors/drift).
    query_embedding_model: ReleaseAttribute | None = None
    # The OpenTelemetry instrumentation scope of the request span (``opentelemetry.
    # instrumentation.langchain``, ...): field coverage is counted per instrumentation.
    instrumentation: ReleaseAttribute | None = None
    # Evaluators' verdicts carried inside the request's spans (span events, annotations,
    # EVALUATOR spans); detectors/evaluations counts them. Empty in older records.
    evaluations: Annotated[tuple[EvaluationResult, ...], _JsonArray(max_length=256)] = ()
    # How many retrieval steps the request made: retriever spans and tool calls that
    # retrieved (an agent may retrieve several times). None where the producer does not
    # say (older records).
    retrieval_calls: Count | None = None
    # The request's tool calls (an agent's), in call order; empty for a pipeline.
    tool_calls: Annotated[tuple[ToolCall, ...], _JsonArray(max_length=MAX_TOOL_CALLS)] = ()


@dataclass(frozen=True, slots=True)
class Label:
    """Gold documents for a trace (by ``trace_id``) or a golden-set probe (by ``probe_id``)."""

    gold_doc_ids: tuple[str, ...]
    trace_id: str | None = None
    probe_id: str | None = None


@dataclass(frozen=True, slots=True)
class Feedback:
    """A user's reaction to an answer."""

    trace_id: str
    kind: FeedbackKind
    reason: FeedbackReason | None = None  # thumbs_down only
    session_id: str | None = None
    doc_id: str | None = None  # click only: the cited document clicked
    dwell_seconds: float | None = None  # dwell only: finite, 0 to MAX_DWELL_SECONDS


# The answer's characters a judge found unsupported: (start, end) offsets, end exclusive.
Spans = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class TierVerdict:
    """One tier of a judge cascade on one answer: the tier's judge (its identity), its
    score (None: it gave none), and whether the score fell in the uncertain band, which
    sends the answer on to the next tier."""

    judge: str
    score: float | None
    escalated: bool = False


@dataclass(frozen=True, slots=True)
class JudgeScore:
    """A judge's score of a trace's answer (HHEM: P(consistent); an LLM judge: the share of
    supported claims), emitted by the detector that scored it so that others (the review
    sampler) can act on it."""

    trace_id: str
    score: float
    threshold: float  # the scorer's threshold: under it the answer counts as unsupported
    judge: str = "hhem"  # the judge's identity: review corrects each judge apart
    spans: Spans = ()  # unsupported parts of the answer, from a judge that finds them
    tiers: tuple[TierVerdict, ...] = ()  # a cascade's tiers, first to last


# Bounds on a verdict's parts read from a record (a Kafka topic, the review store): hostile
# input like every record.
MAX_JUDGE_CHARS = 256
MAX_SPANS = 256
MAX_TIERS = 4


def bounded_judge(value: Any) -> str:
    """A judge identity from a record: a string of at most ``MAX_JUDGE_CHARS``."""
    if not isinstance(value, str) or len(value) > MAX_JUDGE_CHARS:
        raise ValueError("a judge identity is a string of at most 256 characters")
    return value


def spans_from_record(value: Any) -> Spans:
    """At most ``MAX_SPANS`` (start, end) pairs of non-negative offsets, start < end."""
    if not isinstance(value, list) or len(value) > MAX_SPANS:
        raise ValueError(f"spans: a list of at most {MAX_SPANS}")
    spans = []
    for span in value:
        start, end = span  # a pair, or ValueError
        if not (type(start) is int and type(end) is int and 0 <= start < end):
            raise ValueError("a span is two offsets, 0 <= start < end")
        spans.append((start, end))
    return tuple(spans)


def verdict_parts_record(spans: Spans, tiers: tuple[TierVerdict, ...]) -> dict[str, Any]:
    """The ``spans`` and ``tiers`` fields of a record, as their decoders read them."""
    return {
        "spans": [list(span) for span in spans],
        "tiers": [{"judge": t.judge, "score": t.score, "escalated": t.escalated} for t in tiers],
    }


def tiers_from_record(value: Any) -> tuple[TierVerdict, ...]:
    """At most ``MAX_TIERS`` tiers of ``{judge, score, escalated}``."""
    if not isinstance(value, list) or len(value) > MAX_TIERS:
        raise ValueError(f"tiers: a list of at most {MAX_TIERS}")
    return tuple(_tier_from_record(tier) for tier in value)


def _tier_from_record(value: Any) -> TierVerdict:
    score = value["score"]
    if score is not None and not 0.0 <= float(score) <= 1.0:
        raise ValueError("a tier's score outside [0, 1]")
    return TierVerdict(
        bounded_judge(value["judge"]),
        None if score is None else float(score),
        value["escalated"] is True,
    )


@dataclass(frozen=True, slots=True)
class UnscoredAnswer:
    """A sampled answer the faithfulness detector settled without a score: its outcome
    (no_answer, no_claims, refusal, no_context, or error: the judge gave none). Apart from
    ``JudgeScore`` so that those acting on scores never see one without a score."""

    trace_id: str
    outcome: str
    judge: str = "hhem"


@dataclass(frozen=True, slots=True)
class ExclusionOutcome:
    """The false-exclusion detector's decision on a labeled trace with eligible gold: True
    when a relevance filter removed every eligible gold document. Emitted so that others
    (the shadow comparison) can compare decisions without importing that detector."""

    trace_id: str
    excluded: bool
    excluded_share: float | None = None  # of the eligible gold, the share a filter removed


Event = Label | Feedback | JudgeScore | UnscoredAnswer | ExclusionOutcome | EvaluationResult
