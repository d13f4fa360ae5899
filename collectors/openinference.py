"""The spans of one trace -> ``RagTrace``, by the OpenInference (and OTel GenAI) conventions.

Real instrumentations do not agree on where a field lives: LangChain keeps
document ids only in the retriever's JSON output, Haystack's request input is
the pipeline's JSON, OTel GenAI spans carry query and answer only as chat
messages, LlamaIndex nests one LLM call in another. So every field has an
ordered list of places to look (``MappingConfig``, the ``mapping:`` section),
and the first usable value wins. Attributes of an unexpected type are ignored
rather than trusted: a producer's typo must not crash a detector.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from collectors.otlp import RERANKED_DOCUMENTS, Span
from collectors.span_documents import documents, retrieved_documents, with_retrieved_fields
from collectors.span_text import (
    count,
    first_pointer,
    generated_text,
    io_value,
    json_object,
    last_user_message,
    number,
    parse_pointer,
    text,
    text_list,
    usable_id,
    usable_text,
    vector,
)
from collectors.span_tree import depths
from collectors.span_usage import calls_counted_once, embedding_usage, llm_usage, provider
from monitor.config import MappingConfig
from monitor.trace import MAX_RELEASE_ATTRIBUTE_LENGTH, Context, RagTrace, Source, Usage

_KIND = "openinference.span.kind"
_QUERY_VECTOR = "embedding.embeddings.0.embedding.vector"
_QUERY_TEXT = "embedding.embeddings.0.embedding.text"
_REQUEST_KINDS = ("CHAIN", "AGENT")
_STAGE_OF_KIND = {
    "RETRIEVER": "retrieve",
    "RERANKER": "rerank",
    "EMBEDDING": "embed",
    "LLM": "generate",
}
_KIND_OF_GEN_AI_OPERATION = {
    "chat": "LLM",
    "text_completion": "LLM",
    "generate_content": "LLM",
    "embeddings": "EMBEDDING",
    "invoke_agent": "AGENT",
    "create_agent": "AGENT",
    "execute_tool": "TOOL",
}


class TraceMapper:
    """Builds ``RagTrace`` values from assembled spans, as the ``mapping:`` config says."""

    def __init__(self, config: MappingConfig | None = None) -> None:
        config = config or MappingConfig()
        self._request_kinds = frozenset(config.request_kinds)
        self._query_pointers = tuple(map(parse_pointer, config.query_pointers))
        self._answer_pointers = tuple(map(parse_pointer, config.answer_pointers))
        self._doc_id_keys = tuple(config.doc_id_keys)
        # Most metadata names no source id: one search of the raw JSON spares parsing it.
        self._names_doc_id = re.compile(
            "|".join(re.escape(orjson.dumps(key).decode()) for key in config.doc_id_keys) or "(?!)"
        ).search
        self._tenant_key = config.tenant_metadata_key
        self._tenant_resource_attribute = config.tenant_resource_attribute
        self._first_token_events = frozenset(config.first_token_events)

    def build(self, spans: Sequence[Span], source: Source) -> RagTrace | None:
        """The ``RagTrace`` of one assembled trace, or None when it is not a RAG request."""
        kinds = {span.span_id: _span_kind(span) for span in spans}
        request = _request_span(spans, kinds)
        found = _StageSpans.of(spans, kinds, request)
        retrieved, reranked, generations = found.retrieved, found.reranked, found.generations
        embedding_span, usage = found.embedding, found.usage
        costs = []
        for generation in calls_counted_once(generations, spans):
            counted = llm_usage(generation.attributes)
            # A wrapper span with no counts of its own reports nothing to price.
            if counted.prompt_tokens or counted.completion_tokens:
                usage.append(counted)
            cost = number(generation.attributes.get("llm.cost.total"))
            if cost is not None:
                costs.append(cost)
        attrs = _merged_attributes(request, spans)
        query = self._query(request, embedding_span, found.retrievers, generations)
        if not self._is_rag_request(kinds.values(), query):
            return None

        stages = {"total": request.duration_s}
        for stage, spans_of_stage in found.intervals.items():
            stages[stage] = _covered_s(spans_of_stage, request.start_ns, request.end_ns)
        ttft = next(
            (
                seconds
                for span in spans
                if (seconds := self._time_to_first_token(span, kinds[span.span_id])) is not None
            ),
            None,
        )
        if ttft is not None:
            stages["ttft"] = ttft
        # Contexts only of the documents the generator got: parsing the metadata of
        # every retrieved document too costs time per trace (tests/perf/bench_ingest.py).
        contexts = tuple(
            map(
                self._context,
                retrieved if reranked is None else with_retrieved_fields(reranked, retrieved),
            )
        )
        metadata = json_object(attrs.get("metadata"))
        return RagTrace(
            trace_id=request.trace_id,
            time=datetime.fromtimestamp(request.start_ns / 1e9, tz=UTC),
            source=source,
            root_span_id=request.span_id,
            tenant=text(attrs.get("rag.tenant"))
            or text(metadata.get(self._tenant_key))
            or text(request.resource.get(self._tenant_resource_attribute)),
            user_id=text(attrs.get("user.id")),
            session_id=text(attrs.get("session.id")),
            intent=text(attrs.get("rag.intent")),
            query=query,
            answer=self._answer(request, generations),
            contexts=contexts,
            retrieved=tuple(context.doc_id for context in contexts)
            if reranked is None
            else tuple(map(self._doc_id, retrieved)),
            relevance_excluded=text_list(attrs.get("rag.filter.relevance_excluded")),
            entitlement_excluded=text_list(attrs.get("rag.filter.entitlement_excluded")),
            filter_predicate=text(attrs.get("rag.filter.predicate")),
            stages=stages,
            usage=tuple(usage),
            cost_usd=sum(costs) if costs else None,
            query_embedding=vector(embedding_span.attributes.get(_QUERY_VECTOR))
            if embedding_span is not None
            else None,
            probe_id=text(attrs.get("rag.probe_id")),
            metadata=metadata,
            variant=_label_value(attrs.get("rag.variant")),
            pair_id=text(attrs.get("rag.pair_id")),
            query_embedding_model=_embedding_model(embedding_span),
            service_name=_label_value(request.resource.get("service.name")),
            service_version=_label_value(request.resource.get("service.version")),
            deployment_environment=_label_value(request.resource.get("deployment.environment")),
            instrumentation=_label_value(_instrumentation(request, spans)),
        )

    def _is_rag_request(self, kinds: Iterable[str], query: str | None) -> bool:
        present = self._request_kinds.intersection(kinds)
        return "LLM" in present or (bool(present) and query is not None)

    def _query(
        self,
        request: Span,
        embedding_span: Span | None,
        retrievers: Sequence[Span],
        generations: Sequence[Span],
    ) -> str | None:
        """Plain request input, else a JSON pointer into it, the query embedding's text,
        the retriever's input, or the last user message of the first generation."""
        found = self._io_text(request, "input", self._query_pointers)
        if found is not None:  # the common case, without building the fallbacks
            return found

        def candidates() -> Iterator[str | None]:
            if embedding_span is not None:
                yield usable_text(embedding_span.attributes.get(_QUERY_TEXT))
            for retriever in retrievers:
                yield self._io_text(retriever, "input", self._query_pointers)
            for generation in generations:
                yield last_user_message(generation.attributes)

        return next((found for found in candidates() if found is not None), None)

    def _answer(self, request: Span, generations: Sequence[Span]) -> str | None:
        """Plain request output, else a JSON pointer into it, else the final generation's text."""
        found = self._io_text(request, "output", self._answer_pointers)
        if found is not None:  # the common case, without building the fallbacks
            return found
        latest_first = sorted(generations, key=lambda s: s.end_ns, reverse=True)
        candidates = (generated_text(generation.attributes) for generation in latest_first)
        return next((found for found in candidates if found is not None), None)

    @staticmethod
    def _io_text(span: Span, which: str, pointers: Sequence[tuple[str, ...]]) -> str | None:
        """A span's ``input``/``output`` when plain text, else the first JSON pointer's text."""
        plain, document = io_value(span.attributes, which)
        return plain or first_pointer(document, pointers)

    def _context(self, doc: Mapping[str, Any]) -> Context:
        raw = doc.get("metadata")
        metadata = json_object(raw)
        span_id = str(doc["id"])
        source_id = self._source_id(metadata) if self._may_name_source(raw) else None
        return Context(
            doc_id=source_id or span_id,
            chunk_id=span_id if source_id is not None else text(metadata.get("chunk_id")),
            text=text(doc.get("content")),
            score=number(doc.get("score")),
            tenant=text(metadata.get("tenant")),
            metadata=metadata,
        )

    def _doc_id(self, doc: Mapping[str, Any]) -> str:
        """The source document id of a retrieved document, without building its context."""
        raw = doc.get("metadata")
        if not self._may_name_source(raw):
            return str(doc["id"])
        return self._source_id(json_object(raw)) or str(doc["id"])

    def _may_name_source(self, raw: Any) -> bool:
        """False for metadata JSON text that names none of ``doc_id_keys`` (most metadata):
        one search of the text instead of a lookup per key."""
        return not isinstance(raw, str) or self._names_doc_id(raw) is not None

    def _source_id(self, metadata: Mapping[str, Any]) -> str | None:
        """The first ``doc_id_keys`` value in the parsed metadata."""
        for key in self._doc_id_keys:
            value = metadata.get(key)
            if value is not None and usable_id(value):
                return str(value)
        return None

    def _time_to_first_token(self, span: Span, kind: str) -> float | None:
        for event in span.events:
            if event.name in self._first_token_events and event.time_ns >= span.start_ns:
                return (event.time_ns - span.start_ns) / 1e9
        if kind == "LLM":
            return number(span.attributes.get("llm.time_to_first_token"))
        return None


class _StageSpans:
    """What the spans of the stages (everything but the request span) carry."""

    __slots__ = (
        "embedding",
        "generations",
        "intervals",
        "reranked",
        "retrieved",
        "retrievers",
        "usage",
    )

    def __init__(self) -> None:
        self.intervals: dict[str, list[tuple[int, int]]] = {}
        self.retrieved: list[dict[str, Any]] = []
        self.reranked: list[dict[str, Any]] | None = None
        self.retrievers: list[Span] = []
        self.generations: list[Span] = []
        self.embedding: Span | None = None
        self.usage: list[Usage] = []  # embedding and rerank usage

    @classmethod
    def of(cls, spans: Sequence[Span], kinds: Mapping[str, str], request: Span) -> _StageSpans:
        found = cls()
        for span in spans:
            kind = kinds[span.span_id]
            stage = _STAGE_OF_KIND.get(kind)
            if stage is None:
                continue
            if span is not request:
                found.intervals.setdefault(stage, []).append((span.start_ns, span.end_ns))
            attributes = span.attributes
            if kind == "RETRIEVER":
                found.retrievers.append(span)
                found.retrieved.extend(retrieved_documents(attributes))
            elif kind == "RERANKER":
                found.reranked = [
                    doc
                    for doc in documents(attributes, RERANKED_DOCUMENTS)
                    if usable_id(doc.get("id"))
                ]
                rerank_model = text(attributes.get("reranker.model_name"))
                if rerank_model:
                    # Rerank APIs bill search units; one call is one unit unless the span says.
                    units = count(attributes.get("rag.rerank.units")) or 1
                    found.usage.append(
                        Usage(rerank_model, provider(attributes), rerank_units=units)
                    )
            elif kind == "EMBEDDING":
                if found.embedding is None and (
                    _QUERY_VECTOR in attributes or _QUERY_TEXT in attributes
                ):
                    found.embedding = span
                embedded = embedding_usage(attributes)
                if embedded is not None:
                    found.usage.append(embedded)
            else:
                found.generations.append(span)
        found.generations.sort(key=lambda s: (s.start_ns, s.end_ns))
        return found


def _label_value(value: Any) -> str | None:
    """An attribute that becomes a label value: a string of bounded length, else nothing
    (a version of 10 kB is a producer's bug, not a release)."""
    value = text(value)
    return value if value is not None and len(value) <= MAX_RELEASE_ATTRIBUTE_LENGTH else None


def _instrumentation(request: Span, spans: Sequence[Span]) -> str | None:
    """The request span's instrumentation scope, else the first span's that names one
    (an app's own root span may carry an empty scope name)."""
    return request.scope or next((span.scope for span in spans if span.scope), None)


def _embedding_model(span: Span | None) -> str | None:
    """The model of the query vector's span: OpenInference's ``embedding.model_name``, else
    the GenAI conventions' ``gen_ai.request.model`` on an embeddings span."""
    if span is None or _QUERY_VECTOR not in span.attributes:
        return None
    attributes = span.attributes
    return _label_value(attributes.get("embedding.model_name")) or _label_value(
        attributes.get("gen_ai.request.model")
    )


def _span_kind(span: Span) -> str:
    kind = span.attributes.get(_KIND)
    if isinstance(kind, str):
        return kind.upper()
    # OTel GenAI instrumentations set no OpenInference kind.
    operation = span.attributes.get("gen_ai.operation.name")
    if isinstance(operation, str):
        return _KIND_OF_GEN_AI_OPERATION.get(operation, "")
    return "LLM" if "gen_ai.request.model" in span.attributes else ""


def _request_span(spans: Sequence[Span], kinds: Mapping[str, str]) -> Span:
    """The span standing for the whole request: the shallowest CHAIN/AGENT span, else the root."""
    candidates = [span for span in spans if kinds[span.span_id] in _REQUEST_KINDS] or spans
    if len(candidates) == 1:
        return candidates[0]
    depth = depths(spans)
    return min(candidates, key=lambda span: (depth[span.span_id], span.start_ns))


def _covered_s(intervals: list[tuple[int, int]], lower_ns: int, upper_ns: int) -> float:
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


def _merged_attributes(request: Span, spans: Sequence[Span]) -> dict[str, Any]:
    """Attributes of all spans: the request span's win, then the earliest other span's."""
    merged: dict[str, Any] = {}
    for span in sorted(spans, key=lambda s: s.start_ns, reverse=True):
        if span is not request:
            merged.update(span.attributes)
    merged.update(request.attributes)
    return merged
