"""What the monitor can see: which ``RagTrace`` fields each request carries, per instrumentation.

Every guardrail is only as right as the fields it reads, and services run
instrumentations nobody tested: a retriever span the mapping does not know leaves a
request without contexts, which no detector may turn into a score. So the pipeline
counts, for each production request, whether each field is there, labelled with the
OpenTelemetry instrumentation scope that wrote the request span, and counts the traces
it could not read as a request at all (``field="request", present="false"``). A
detector component names the fields it reads (``DetectorComponent.fields``); the
generated ``RagTraceFieldMissing`` ticket watches exactly those (``alerts/field_coverage.py``).

The instrumentation label is bounded like the variant: an allow-list
(``service.instrumentations``), ``other`` beyond it, ``none`` for a trace without a scope
name (a ``rag-trace/1`` record, a span from an unnamed tracer). Which scopes ``other``
stands for is counted beside, by name (``rag_trace_other_instrumentations_total``, the
first ``MAX_INSTRUMENTATIONS`` names): the names to add to the allow-list.

Agents retrieve through tools (collectors/spans/tools.py): the retrieval steps a request
made are a histogram per instrumentation (``rag_trace_retrieval_calls``), and the tool
calls seen are counted by tool name and whether they were read as retrieval
(``rag_trace_tool_calls_total``, the first ``MAX_TOOLS`` names): a tool that retrieves but
is counted ``retrieval="false"`` returns a shape to name in
``collectors.spans.mapping.retrieval_tools``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from typing import Final

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from monitor.contract.names import (
    DERIVED_DOCUMENT_IDS_TOTAL,
    FIELDS_TOTAL,
    OTHER_INSTRUMENTATIONS_TOTAL,
    RETRIEVAL_CALLS,
    TOOL_CALLS_TOTAL,
)
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import STAGES, RagTrace
from monitor.contract.variants import LABEL_VALUE, OTHER, bounded_label

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
MAX_TOOLS = 64  # tool names counted by name; later ones as other
# Retrieval steps a request made: a pipeline's one, an agent's few, a runaway loop's many.
RETRIEVAL_CALL_BUCKETS = (0, 1, 2, 3, 4, 6, 8, 12, 16)


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


_FIELDS_HELP = (
    "Production RAG requests by whether each field the detectors may read is present, "
    "and by the instrumentation scope of the request span (service.instrumentations, "
    'else other; none without a scope); field="request", present="false" counts '
    "traces that could not be read as a request at all (not_rag)."
)
_OTHER_HELP = (
    "Production traces (requests, and traces not read as one) whose instrumentation scope "
    "field coverage counts as other, by the scope's name: add it to "
    "service.instrumentations to see its coverage by name (the first "
    f"{MAX_INSTRUMENTATIONS} names; later ones, and names that are no label value, as other)."
)
_RETRIEVAL_CALLS_HELP = (
    "Production RAG requests by how many retrieval steps they made (retriever spans and "
    "tool calls that retrieved), by instrumentation; requests whose producer does not say "
    "(rag-trace/1 records without retrieval_calls) are not counted."
)
_TOOLS_HELP = (
    "Tool calls of production requests by tool name (the first "
    f"{MAX_TOOLS} names; later ones, and names that are no label value, as other) and "
    'whether the mapping read them as a retrieval step (retrieval="true": their result '
    "held documents, or collectors.spans.mapping.retrieval_tools names them)."
)
_DERIVED_HELP = (
    "Documents of production requests that came without an id: the mapping derived "
    "one from their text (still contexts; no label or gold set can name them)."
)


@dataclass(slots=True)
class _Tally:
    """What the requests of one instrumentation carried, since the start."""

    # When its first request was counted: the _created time of its series.
    created: float | None = None
    # Requests by which fields (``PRESENT``, in order) they carried.
    patterns: dict[tuple[bool, ...], int] = field(default_factory=dict)
    derived: int = 0
    unreadable: int = 0
    unreadable_created: float | None = None
    # Requests by how many retrieval steps they made (those that say).
    retrieval_calls: dict[int, int] = field(default_factory=dict)


class FieldCoverage(Collector):
    """Counts the fields of every production request, and the traces that are none.

    A request is tallied by its pattern (which fields it carries), and a scrape adds the
    patterns up into ``rag_trace_fields_total``: nearly every request of a service has
    the same pattern, so a request costs the pipeline thread one count where a
    prometheus_client increment per field (17) cost about 8 us (tests/perf/bench_ab.py).
    The series, their values and _created times are those of a counter per field and
    present value bound on an instrumentation's first request.
    """

    def __init__(self, registry: SidecarRegistry, instrumentations: Collection[str]) -> None:
        self._allowed = frozenset(instrumentations)
        self._present = tuple(PRESENT.values())
        self._tallies: dict[str, _Tally] = {}
        # The scope names behind the label other: name -> (traces, first seen).
        self._folded: dict[str, tuple[int, float]] = {}
        # Tool calls: (tool, retrieval) -> (calls, first seen).
        self._tools: dict[tuple[str, str], tuple[int, float]] = {}
        self._lock = threading.Lock()  # the pipeline thread counts, a scrape reads
        registry.register(self)

    def observe(self, trace: RagTrace) -> None:
        """Count which fields ``trace`` (a production request) carries."""
        label = bounded_label(trace.instrumentation, self._allowed)
        pattern = tuple([present(trace) for present in self._present])
        derived = sum(context.id_derived for context in trace.contexts)
        with self._lock:
            tally = self._tally(label)
            if tally.created is None:
                tally.created = time.time()
            tally.patterns[pattern] = tally.patterns.get(pattern, 0) + 1
            tally.derived += derived
            calls = trace.retrieval_calls
            if calls is not None:
                tally.retrieval_calls[calls] = tally.retrieval_calls.get(calls, 0) + 1
            if trace.tool_calls:
                self._count_tools(trace)
            if label == OTHER:
                self._fold(trace.instrumentation)

    def _count_tools(self, trace: RagTrace) -> None:
        """Count each tool call by name and whether it retrieved (lock held)."""
        named = {name for name, _ in self._tools}
        for call in trace.tool_calls:
            name = call.name if LABEL_VALUE.match(call.name) else OTHER
            if name not in named and len(named) >= MAX_TOOLS:
                name = OTHER
            named.add(name)
            key = (name, "true" if call.retrieval else "false")
            calls, created = self._tools.get(key, (0, time.time()))
            self._tools[key] = (calls + 1, created)

    def unreadable(self, instrumentation: str | None) -> None:
        """Count a trace that could not be read as a RAG request."""
        label = bounded_label(instrumentation, self._allowed)
        with self._lock:
            tally = self._tally(label)
            if tally.unreadable_created is None:
                tally.unreadable_created = time.time()
            tally.unreadable += 1
            if label == OTHER:
                self._fold(instrumentation)

    def _fold(self, scope: str | None) -> None:
        """Count one trace under the name of a scope counted as other (lock held)."""
        name = scope if scope is not None and LABEL_VALUE.match(scope) else OTHER
        if name not in self._folded and len(self._folded) >= MAX_INSTRUMENTATIONS:
            name = OTHER
        traces, created = self._folded.get(name, (0, time.time()))
        self._folded[name] = (traces + 1, created)

    def _tally(self, label: str) -> _Tally:
        tally = self._tallies.get(label)
        if tally is None:
            tally = self._tallies[label] = _Tally()
        return tally

    def describe(self) -> list[Metric]:
        return list(self._families())

    def collect(self) -> Iterator[Metric]:
        fields, derived, folded, retrievals, tools = self._families()
        with self._lock:
            for scope, (traces, first_seen) in self._folded.items():
                folded.add_metric([scope], traces, created=first_seen)
            for (tool, retrieval), (calls, first_seen) in self._tools.items():
                tools.add_metric([tool, retrieval], calls, created=first_seen)
            tallies = [
                (label, tally.created, dict(tally.patterns), tally.derived, tally.unreadable,
                 tally.unreadable_created)
                for label, tally in self._tallies.items()
            ]  # fmt: skip
            steps = {
                label: dict(tally.retrieval_calls)
                for label, tally in self._tallies.items()
                if tally.retrieval_calls
            }
        for label, counts in steps.items():
            buckets = [
                (f"{bound:g}", sum(n for calls, n in counts.items() if calls <= bound))
                for bound in RETRIEVAL_CALL_BUCKETS
            ]
            total = sum(counts.values())
            retrievals.add_metric(
                [label], [*buckets, ("+Inf", total)], sum(c * n for c, n in counts.items())
            )
        for label, created, patterns, documents, unreadable, unreadable_created in tallies:
            if unreadable_created is not None:
                first = unreadable_created if created is None else min(created, unreadable_created)
                fields.add_metric([REQUEST, "false", label], unreadable, created=first)
            if created is None:
                continue
            requests = sum(patterns.values())
            fields.add_metric([REQUEST, "true", label], requests, created=created)
            if unreadable_created is None:
                fields.add_metric([REQUEST, "false", label], 0, created=created)
            present = [0] * len(self._present)
            for pattern, count in patterns.items():
                for index, carried in enumerate(pattern):
                    if carried:
                        present[index] += count
            for name, count in zip(PRESENT, present, strict=True):
                fields.add_metric([name, "true", label], count, created=created)
                fields.add_metric([name, "false", label], requests - count, created=created)
            derived.add_metric([label], documents, created=created)
        yield fields
        yield derived
        yield folded
        yield retrievals
        yield tools

    @staticmethod
    def _families() -> tuple[
        CounterMetricFamily,
        CounterMetricFamily,
        CounterMetricFamily,
        HistogramMetricFamily,
        CounterMetricFamily,
    ]:
        return (
            CounterMetricFamily(
                FIELDS_TOTAL, _FIELDS_HELP, labels=["field", "present", "instrumentation"]
            ),
            CounterMetricFamily(
                DERIVED_DOCUMENT_IDS_TOTAL, _DERIVED_HELP, labels=["instrumentation"]
            ),
            CounterMetricFamily(OTHER_INSTRUMENTATIONS_TOTAL, _OTHER_HELP, labels=["scope"]),
            HistogramMetricFamily(
                RETRIEVAL_CALLS, _RETRIEVAL_CALLS_HELP, labels=["instrumentation"]
            ),
            CounterMetricFamily(TOOL_CALLS_TOTAL, _TOOLS_HELP, labels=["tool", "retrieval"]),
        )
