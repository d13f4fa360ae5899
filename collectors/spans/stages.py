"""What the spans of a request's stages carry: documents, model calls, usage, timings.

One pass over the spans of a trace sorts them by kind (``collectors/spans/kinds.py``):
the retrievers' documents in span start order, the generations, the calls that judge
the request instead of serving it, the query embedding, each stage's intervals, the
time to the first token and the evaluators' verdicts.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from collectors.spans.documents import attribute_documents, documents, retrieved_documents
from collectors.spans.evaluations import add_results
from collectors.spans.kinds import JUDGE_KINDS, STAGE_OF_KIND
from collectors.spans.span import RERANKED_DOCUMENTS, Span
from collectors.spans.text import count, number, text
from collectors.spans.tools import RetrievalTools, tool_call
from collectors.spans.tree import SpanTree, nearest_marked_ancestors
from collectors.spans.usage import calls_counted_once, embedding_usage, llm_usage, provider
from monitor.contract.trace import MAX_TOOL_CALLS, EvaluationResult, ToolCall, Usage

QUERY_VECTOR = "embedding.embeddings.0.embedding.vector"
QUERY_TEXT = "embedding.embeddings.0.embedding.text"

# Tool calls are retrieval steps by the shape of their result unless the mapping names them.
_SHAPED_TOOLS = RetrievalTools()
# The documents a span lists in a JSON value, and the usage it reports in one where the
# attributes count no tokens (``collectors.spans.json_values``).
JsonDocumentsReader = Callable[[Mapping[str, Any]], list[dict[str, Any]]]
JsonUsageReader = Callable[[Mapping[str, Any], Usage], Usage]


class StageSpans:
    """What the spans of the stages (everything but the request span) carry, and the
    verdicts of every span."""

    __slots__ = (
        "documents",
        "embedding",
        "evaluations",
        "generations",
        "intervals",
        "judged",
        "judges",
        "reranked",
        "retrievers",
        "tool_calls",
        "ttft",
        "usage",
    )

    def __init__(self, judged: Collection[str]) -> None:
        self.judged = judged  # the ids of the spans that judge the request (judged_spans)
        self.intervals: dict[str, list[tuple[int, int]]] = {}
        # (span start, its documents) per span that holds retrieved documents
        self.documents: list[tuple[int, list[dict[str, Any]]]] = []
        self.reranked: list[dict[str, Any]] | None = None
        self.retrievers: list[Span] = []
        self.tool_calls: list[tuple[int, ToolCall]] = []  # (span start, the call)
        self.generations: list[Span] = []
        self.judges: list[Span] = []  # LLM calls that judge the request
        self.embedding: Span | None = None
        self.usage: list[Usage] = []  # embedding and rerank usage
        self.ttft: float | None = None  # of the first span that tells it, in span order
        self.evaluations: list[EvaluationResult] = []  # of every span, in span order

    def seconds(self, request: Span) -> dict[str, float]:
        """Each stage's seconds within the request (``covered_s``), beside the request's
        total and the time to the first token."""
        stages = {"total": request.duration_s}
        for stage, intervals in self.intervals.items():
            stages[stage] = covered_s(intervals, request.start_ns, request.end_ns)
        if self.ttft is not None:
            stages["ttft"] = self.ttft
        return stages

    def usage_and_cost(
        self, tree: SpanTree, json_usage: JsonUsageReader | None
    ) -> tuple[tuple[Usage, ...], float | None]:
        """Every model's usage and the priced cost the spans report (in a JSON value where
        ``mapping.json_usage`` says and the attributes hold no counts). A judge's calls are
        no generation of the answer, but the request paid for them: they count here."""
        usage = self.usage  # embedding and rerank usage
        costs = []
        calls = self.generations
        if self.judges:
            calls = sorted([*calls, *self.judges], key=start_order)
        for call in calls_counted_once(calls, tree):
            counted = llm_usage(call.attributes)
            if json_usage is not None and not (counted.prompt_tokens or counted.completion_tokens):
                counted = json_usage(call.attributes, counted)
            # A wrapper span with no counts of its own reports nothing to price.
            if counted.prompt_tokens or counted.completion_tokens:
                usage.append(counted)
            cost = number(call.attributes.get("llm.cost.total"))
            if cost is not None:
                costs.append(cost)
        return tuple(usage), sum(costs) if costs else None

    def calls(self) -> tuple[ToolCall, ...]:
        """The tool calls in call order."""
        return tuple(call for _, call in sorted(self.tool_calls, key=_first))[:MAX_TOOL_CALLS]

    def retrieval_calls(self) -> int:
        """Retrieval steps: retriever spans and the tool calls that retrieved."""
        return len(self.retrievers) + sum(call.retrieval for _, call in self.tool_calls)

    def retrieved(self) -> list[dict[str, Any]]:
        """The retrieved documents of every span that holds some, in span start order (an
        agent that retrieves twice gave the generator both results)."""
        if len(self.documents) == 1:  # the common case
            return self.documents[0][1]
        return [doc for _, docs in sorted(self.documents, key=_first) for doc in docs]

    @classmethod
    def of(
        cls,
        tree: SpanTree,
        request: Span,
        *,
        document_attributes: Sequence[str],
        first_token_events: Collection[str],
        json_documents: JsonDocumentsReader | None = None,
        retrieval_tools: RetrievalTools = _SHAPED_TOOLS,
    ) -> StageSpans:
        found = cls(judged_spans(tree))
        kinds, judged = tree.kinds, found.judged
        for span in tree.spans:
            kind, attributes = kinds[span.span_id], span.attributes
            add_results(found.evaluations, span, kind)
            if span.span_id in judged:  # a judge's stream is not the answer's
                if kind == "LLM":
                    found.judges.append(span)
                continue
            if found.ttft is None:
                found.ttft = _time_to_first_token(span, kind, first_token_events)
            if kind != "RETRIEVER" and document_attributes:
                found.add_documents(span, _attribute_documents(attributes, document_attributes))
            stage = STAGE_OF_KIND.get(kind)
            if stage is None:
                if kind == "TOOL" and span is not request:
                    found.add_tool_call(span, retrieval_tools)
                continue
            if span is not request:
                found.intervals.setdefault(stage, []).append((span.start_ns, span.end_ns))
            if kind == "RETRIEVER":
                found.retrievers.append(span)
                found.add_documents(
                    span,
                    retrieved_documents(attributes)
                    or _attribute_documents(attributes, document_attributes)
                    or (json_documents(attributes) if json_documents is not None else []),
                )
            elif kind == "RERANKER":
                found.add_reranker(attributes, json_documents)
            elif kind == "EMBEDDING":
                if found.embedding is None and (
                    QUERY_VECTOR in attributes or QUERY_TEXT in attributes
                ):
                    found.embedding = span
                embedded = embedding_usage(attributes)
                if embedded is not None:
                    found.usage.append(embedded)
            else:
                found.generations.append(span)
        found.retrievers.sort(key=start_order)
        found.generations.sort(key=start_order)
        return found

    def add_tool_call(self, span: Span, retrieval_tools: RetrievalTools) -> None:
        """A tool call that retrieves is a retrieval step: its time counts in ``retrieve``
        and its documents beside a retriever's. Its arguments are the agent's own query,
        never the question: it stays out of ``retrievers``."""
        docs = retrieval_tools.documents(span)
        if docs is not None:
            self.intervals.setdefault("retrieve", []).append((span.start_ns, span.end_ns))
            self.add_documents(span, docs)
        self.tool_calls.append((span.start_ns, tool_call(span, docs)))

    def add_documents(self, span: Span, docs: list[dict[str, Any]]) -> None:
        if docs:
            self.documents.append((span.start_ns, docs))

    def add_reranker(
        self, attributes: Mapping[str, Any], json_documents: JsonDocumentsReader | None
    ) -> None:
        reranked = documents(attributes, RERANKED_DOCUMENTS)
        if not reranked and json_documents is not None:
            reranked = json_documents(attributes)
        # A reranker span that lists no documents (OpenLLMetry's ``rerank`` operation
        # without mapping.json_documents) says nothing of what the generator got: the
        # retrieved documents stand.
        self.reranked = reranked or None
        rerank_model = text(attributes.get("reranker.model_name")) or text(
            attributes.get("gen_ai.request.model")
        )
        if rerank_model:
            # Rerank APIs bill search units; one call is one unit unless the span says.
            units = count(attributes.get("rag.rerank.units")) or 1
            self.usage.append(Usage(rerank_model, provider(attributes), rerank_units=units))


def _time_to_first_token(
    span: Span, kind: str, first_token_events: Collection[str]
) -> float | None:
    """Seconds from the span's start to its first event named in
    ``mapping.first_token_events``, else an LLM span's ``llm.time_to_first_token``."""
    for event in span.events:
        if event.name in first_token_events and event.time_ns >= span.start_ns:
            return (event.time_ns - span.start_ns) / 1e9
    if kind == "LLM":
        return number(span.attributes.get("llm.time_to_first_token"))
    return None


def _attribute_documents(
    attributes: Mapping[str, Any], names: Sequence[str]
) -> list[dict[str, Any]]:
    """The documents under the first of ``collectors.spans.mapping.document_attributes``
    the span holds."""
    for name in names:
        found = attribute_documents(attributes, name)
        if found:
            return found
    return []


def judged_spans(tree: SpanTree) -> Collection[str]:
    """The ids of the spans that judge the request rather than serve it: those below an
    EVALUATOR (an LLM judge), and those below a GUARDRAIL when the request generates outside
    any guardrail too. A guard that wraps the only model call (guardrails-ai validating the
    answer it asked for) holds the generation itself."""
    kinds = tree.kinds
    if JUDGE_KINDS.isdisjoint(kinds.values()):  # the common case
        return ()
    judges = {span_id for span_id, kind in kinds.items() if kind in JUDGE_KINDS}
    below = nearest_marked_ancestors(tree.top_down, judges)
    if any(kind == "LLM" and span_id not in below for span_id, kind in kinds.items()):
        return below.keys()
    # Every model call is inside a judge: those inside a guardrail are the generation.
    return {span_id for span_id, judge in below.items() if kinds[judge] == "EVALUATOR"}


def start_order(span: Span) -> tuple[int, int]:
    return span.start_ns, span.end_ns


def _first(item: tuple[int, Any]) -> int:
    return item[0]


def covered_s(intervals: list[tuple[int, int]], lower_ns: int, upper_ns: int) -> float:
    """Seconds of [lower, upper] covered by the union of ``intervals``: nested spans of one
    stage count once, sequential ones add up, and a stage never exceeds the request."""
    if len(intervals) == 1:  # the common case
        start, stop = intervals[0]
        return max(min(stop, upper_ns) - max(start, lower_ns), 0) / 1e9
    intervals.sort()
    covered = 0
    end = lower_ns
    for span_start, span_stop in intervals:
        start, stop = max(span_start, end), min(span_stop, upper_ns)
        if stop > start:
            covered += stop - start
            end = stop
    return covered / 1e9
