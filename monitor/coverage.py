"""What the monitor can see: which ``RagTrace`` fields each request carries, per instrumentation.

Every guardrail is only as right as the fields it reads, and services run
instrumentations nobody tested: a retriever span the mapping does not know leaves a
request without contexts, which no detector may turn into a score. So the pipeline
counts, for each production request, whether each field is there, labelled with the
OpenTelemetry instrumentation scope that wrote the request span, and counts the traces
it could not read as a request at all (``field="request", present="false"``). A
detector component names the fields it reads (``DetectorComponent.fields``); the
generated ``RagTraceFieldMissing`` ticket watches exactly those (``alerts/coverage.py``).

The instrumentation label is bounded like the variant: an allow-list
(``service.instrumentations``), ``other`` beyond it, ``none`` for a trace without a scope
name (a ``rag-trace/1`` record, a span from an unnamed tracer).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Final

from prometheus_client import CollectorRegistry, Counter

from monitor.names import DERIVED_DOCUMENT_IDS_TOTAL, FIELDS_TOTAL
from monitor.trace import STAGES, RagTrace
from monitor.variants import bounded_label

REQUEST: Final = "request"  # the field a trace lacks when it could not be read as a request


# The scope names of the instrumentations the conformance suite runs (README, "Works with").
DEFAULT_INSTRUMENTATIONS = (
    "openinference.instrumentation.langchain",
    "openinference.instrumentation.llama_index",
    "openinference.instrumentation.haystack",
    "opentelemetry.instrumentation.openai_v2",
    "opentelemetry.instrumentation.langchain",
    "opentelemetry.instrumentation.openai",
)
MAX_INSTRUMENTATIONS = 64  # each multiplies the coverage series by the fields counted


def stage_field(stage: str) -> str:
    """The coverage field of a latency stage: ``stage_retrieve``."""
    return f"stage_{stage}"


def _has_usage(trace: RagTrace) -> bool:
    return any(
        u.prompt_tokens or u.completion_tokens or u.embedding_tokens or u.rerank_units
        for u in trace.usage
    )


def _stage_present(stage: str) -> Callable[[RagTrace], bool]:
    return lambda trace: stage in trace.stages


# What "present" means for each field: a value a detector can use, not an empty one.
PRESENT: dict[str, Callable[[RagTrace], bool]] = {
    "query": lambda trace: bool(trace.query),
    "answer": lambda trace: bool(trace.answer),
    # the evidence an answer is judged against: at least one context with text
    "contexts": lambda trace: any(
        context.text and not context.text.isspace() for context in trace.contexts
    ),
    # ids a label or a gold set can name: none derived from a document's text
    "retrieved_ids": lambda trace: (
        bool(trace.retrieved) and not any(context.id_derived for context in trace.contexts)
    ),
    "usage": _has_usage,
    "query_vector": lambda trace: trace.query_embedding is not None,
    "tenant": lambda trace: bool(trace.tenant),
    # total is the request span's duration: every request has it
    **{stage_field(stage): _stage_present(stage) for stage in STAGES if stage != "total"},
}
FIELDS: tuple[str, ...] = (REQUEST, *PRESENT)


class FieldCoverage:
    """Counts the fields of every production request, and the traces that are none."""

    def __init__(self, registry: CollectorRegistry, instrumentations: Collection[str]) -> None:
        self._allowed = frozenset(instrumentations)
        self._fields = Counter(
            FIELDS_TOTAL,
            "Production RAG requests by whether each field the detectors may read is present, "
            "and by the instrumentation scope of the request span (service.instrumentations, "
            'else other; none without a scope); field="request", present="false" counts '
            "traces that could not be read as a request at all (not_rag).",
            ["field", "present", "instrumentation"],
            registry=registry,
        )
        self._derived = Counter(
            DERIVED_DOCUMENT_IDS_TOTAL,
            "Documents of production requests that came without an id: the mapping derived "
            "one from their text (still contexts; no label or gold set can name them).",
            ["instrumentation"],
            registry=registry,
        )
        # Children bound per instrumentation on first sight: a labels() lookup per field
        # and trace would show in the ingest profile.
        self._bound: dict[str, list[tuple[Callable[[RagTrace], bool], Counter, Counter]]] = {}
        self._derived_of: dict[str, Counter] = {}

    def observe(self, trace: RagTrace) -> None:
        """Count which fields ``trace`` (a production request) carries."""
        label = bounded_label(trace.instrumentation, self._allowed)
        for present, yes, no in self._bound.get(label) or self._bind(label):
            (yes if present(trace) else no).inc()
        derived = sum(context.id_derived for context in trace.contexts)
        if derived:
            self._derived_of[label].inc(derived)

    def unreadable(self, instrumentation: str | None) -> None:
        """Count a trace that could not be read as a RAG request."""
        label = bounded_label(instrumentation, self._allowed)
        self._fields.labels(REQUEST, "false", label).inc()

    def _bind(self, label: str) -> list[tuple[Callable[[RagTrace], bool], Counter, Counter]]:
        present_always = (lambda trace: True, *self._children(REQUEST, label))
        bound = [present_always]
        bound += [(present, *self._children(name, label)) for name, present in PRESENT.items()]
        self._bound[label] = bound
        self._derived_of[label] = self._derived.labels(label)
        return bound

    def _children(self, field: str, label: str) -> tuple[Counter, Counter]:
        return self._fields.labels(field, "true", label), self._fields.labels(field, "false", label)
