"""The spans of one trace -> ``RagTrace``, by the OpenInference, OTel GenAI and OpenLLMetry
conventions.

Real instrumentations do not agree on where a field lives: LangChain keeps
document ids only in the retriever's JSON output, Haystack's request input is
the pipeline's JSON, OTel GenAI spans carry query and answer only as chat
messages, LlamaIndex nests one LLM call in another, OpenLLMetry wraps a chain's
input and output in JSON of its own. So every field has an
ordered list of places to look (``MappingConfig``, the ``mapping:`` section),
and the first usable value wins. Attributes of an unexpected type are ignored
rather than trusted: a producer's typo must not crash a detector.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from collectors.spans.config import MappingConfig
from collectors.spans.documents import derived_id, holds_documents, with_retrieved_fields
from collectors.spans.json_values import JsonDocuments, JsonUsage
from collectors.spans.kinds import span_kind
from collectors.spans.named_spans import SpanNames
from collectors.spans.span import Span
from collectors.spans.stages import (
    QUERY_TEXT,
    QUERY_VECTOR,
    StageSpans,
)
from collectors.spans.text import (
    event_messages,
    event_text,
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
from collectors.spans.tools import RetrievalTools
from collectors.spans.tree import SpanTree
from monitor.contract.trace import (
    MAX_DOCUMENTS,
    MAX_RELEASE_ATTRIBUTE_LENGTH,
    Context,
    RagTrace,
    Source,
)

_RETRIEVAL_QUERY = "gen_ai.retrieval.query.text"
_REQUEST_KINDS = ("CHAIN", "AGENT")
# What OpenLLMetry writes for each key of a LangChain call's ``metadata``.
_ASSOCIATION_PROPERTY = "traceloop.association.properties."


class TraceMapper:
    """Builds ``RagTrace`` values from assembled spans, as the ``mapping:`` config says."""

    def __init__(self, config: MappingConfig | None = None) -> None:
        config = config or MappingConfig()
        self._request_kinds = frozenset(config.request_kinds)
        self._query_pointers = tuple(map(parse_pointer, config.query_pointers))
        self._answer_pointers = tuple(map(parse_pointer, config.answer_pointers))
        self._doc_id_keys = tuple(config.doc_id_keys)
        self._doc_id_key_set = frozenset(config.doc_id_keys)
        # Most metadata names no source id: one search of the raw JSON spares parsing it.
        self._names_doc_id = re.compile(
            "|".join(re.escape(orjson.dumps(key).decode()) for key in config.doc_id_keys) or "(?!)"
        ).search
        self._tenant_key = config.tenant_metadata_key
        self._association_tenant = _ASSOCIATION_PROPERTY + config.tenant_metadata_key
        self._tenant_resource_attribute = config.tenant_resource_attribute
        self._first_token_events = frozenset(config.first_token_events)
        self._document_attributes = tuple(config.document_attributes)
        # The settings for instrumentations no convention covers: decided here, once, so
        # that a mapping without them costs nothing per span.
        self._span_names = (
            SpanNames(config.span_kind_names, config.request_span_names)
            if config.span_kind_names or config.request_span_names
            else None
        )
        self._json_documents = (
            JsonDocuments(config.json_documents) if config.json_documents.attribute else None
        )
        self._json_usage = JsonUsage(config.json_usage) if config.json_usage.attribute else None
        self._retrieval_tools = RetrievalTools(config.retrieval_tools)

    def tree(self, spans: Sequence[Span]) -> SpanTree:
        """The trace as this mapping reads it. A span's kind is what its convention names,
        and RETRIEVER for a span of no kind that holds documents under
        ``collectors.spans.mapping.document_attributes``, else the kind its name says
        (``span_kind_names``)."""
        kinds = {span.span_id: span_kind(span) for span in spans}
        if self._document_attributes:
            for span in spans:
                if not kinds[span.span_id] and any(
                    holds_documents(span.attributes, name) for name in self._document_attributes
                ):
                    kinds[span.span_id] = "RETRIEVER"
        tree = SpanTree(spans, kinds)
        if self._span_names is not None:
            self._span_names.add_kinds(tree)
        return tree

    def build(self, spans: Sequence[Span], source: Source) -> RagTrace | None:
        """The ``RagTrace`` of one assembled trace, or None when it is not a RAG request."""
        tree = self.tree(spans)
        named = self._span_names.request_spans(spans) if self._span_names is not None else []
        request = _request_span(tree, named)
        found = StageSpans.of(
            tree,
            request,
            document_attributes=self._document_attributes,
            first_token_events=self._first_token_events,
            json_documents=self._json_documents,
            retrieval_tools=self._retrieval_tools,
        )
        generations, embedding_span = found.generations, found.embedding
        attrs = _merged_attributes(request, tree)
        query = self._query(request, embedding_span, found.retrievers, generations)
        if not self._is_rag_request(tree, found.judged, query) and (not named or query is None):
            return None

        answer = self._answer(request, generations)
        metadata = json_object(attrs.get("metadata"))
        stages = found.seconds(request)
        usage, cost = found.usage_and_cost(tree, self._json_usage)
        retrieved, reranked = found.retrieved(), found.reranked
        # Contexts only of the documents the generator got: parsing the metadata of
        # every retrieved document too costs time per trace (tests/perf/bench_ingest.py).
        # map and filter, not a generator: one Python frame less per document.
        given = retrieved if reranked is None else with_retrieved_fields(reranked, retrieved)
        contexts = tuple(filter(None, map(self._context, given)))
        if len(found.documents) > 1:  # several retrieval steps
            contexts = _first_of_each(contexts)
        contexts = contexts[:MAX_DOCUMENTS]
        return RagTrace(
            trace_id=request.trace_id,
            time=datetime.fromtimestamp(request.start_ns / 1e9, tz=UTC),
            source=source,
            root_span_id=request.span_id,
            tenant=text(attrs.get("rag.tenant"))
            or text(metadata.get(self._tenant_key))
            or text(attrs.get(self._association_tenant))
            or text(request.resource.get(self._tenant_resource_attribute)),
            user_id=text(attrs.get("user.id")),
            session_id=text(attrs.get("session.id")),
            intent=text(attrs.get("rag.intent")),
            query=query,
            answer=answer,
            contexts=contexts,
            retrieved=tuple(context.doc_id for context in contexts)
            if reranked is None
            else tuple(filter(None, map(self._doc_id, retrieved)))[:MAX_DOCUMENTS],
            relevance_excluded=text_list(attrs.get("rag.filter.relevance_excluded")),
            entitlement_excluded=text_list(attrs.get("rag.filter.entitlement_excluded")),
            filter_predicate=text(attrs.get("rag.filter.predicate")),
            stages=stages,
            usage=usage,
            cost_usd=cost,
            query_embedding=vector(embedding_span.attributes.get(QUERY_VECTOR))
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
            instrumentation=_label_value(_instrumentation(request, tree)),
            evaluations=tuple(found.evaluations),
            retrieval_calls=found.retrieval_calls(),
            tool_calls=found.calls() if found.tool_calls else (),
        )

    def _is_rag_request(self, tree: SpanTree, judged: Collection[str], query: str | None) -> bool:
        """An LLM call (a judge's is not one), or a span of another request kind and a query."""
        kinds = tree.kinds
        present = self._request_kinds.intersection(
            kinds.values()
            if not judged
            else (kind for span_id, kind in kinds.items() if span_id not in judged)
        )
        return "LLM" in present or (bool(present) and query is not None)

    def _query(
        self,
        request: Span,
        embedding_span: Span | None,
        retrievers: Sequence[Span],
        generations: Sequence[Span],
    ) -> str | None:
        """Plain request input, else a JSON pointer into it, the request span's user message
        as an event, the query embedding's text, the retriever's query (GenAI
        ``gen_ai.retrieval.query.text``, else its input), or the last user message of the
        first generation (its attributes, else its events)."""
        found = self._io_text(request, "input", self._query_pointers)
        if found is not None:  # the common case, without building the fallbacks
            return found

        def candidates() -> Iterator[str | None]:
            if request.events:  # messages as events (strands-agents, the GenAI events)
                yield event_text(last_user_message(event_messages(request.events)))
            if embedding_span is not None:
                yield usable_text(embedding_span.attributes.get(QUERY_TEXT))
            for retriever in retrievers:
                yield usable_text(retriever.attributes.get(_RETRIEVAL_QUERY))
                yield self._io_text(retriever, "input", self._query_pointers)
            for generation in generations:
                yield last_user_message(generation.attributes)
                if generation.events:
                    yield event_text(last_user_message(event_messages(generation.events)))

        return next((found for found in candidates() if found is not None), None)

    def _answer(self, request: Span, generations: Sequence[Span]) -> str | None:
        """Plain request output, else a JSON pointer into it, else the output messages of the
        request span's events, else the final generation's text."""
        found = self._io_text(request, "output", self._answer_pointers)
        if found is not None:  # the common case, without building the fallbacks
            return found
        latest_first = sorted(generations, key=lambda s: s.end_ns, reverse=True)

        def candidates() -> Iterator[str | None]:
            if request.events:  # messages as events (strands-agents, the GenAI events)
                yield event_text(generated_text(event_messages(request.events)))
            for generation in latest_first:
                yield generated_text(generation.attributes)
                if generation.events:
                    yield event_text(generated_text(event_messages(generation.events)))

        return next((found for found in candidates() if found is not None), None)

    @staticmethod
    def _io_text(span: Span, which: str, pointers: Sequence[tuple[str, ...]]) -> str | None:
        """A span's ``input``/``output`` when plain text, else the first JSON pointer's text."""
        plain, document = io_value(span.attributes, which)
        return plain or first_pointer(document, pointers)

    def _context(self, doc: Mapping[str, Any]) -> Context | None:
        """The document as a context: its source id from the metadata (``doc_id_keys``) with
        its own id as the chunk, else its own id, else an id derived from its text; None for
        a document with neither id nor text, which is no evidence."""
        raw = doc.get("metadata")
        metadata = json_object(raw)
        content = text(doc.get("content"))
        own_id = doc.get("id")
        # The metadata is parsed here anyway, and most holds none of doc_id_keys: a set test
        # says so sooner than the search of its text, which still has the last word.
        source_id = (
            self._source_id(metadata)
            if not self._doc_id_key_set.isdisjoint(metadata) and self._may_name_source(raw)
            else None
        )
        chunk_id, derived = None, False
        if usable_id(own_id):
            doc_id = str(own_id)
            if source_id is not None:
                doc_id, chunk_id = source_id, doc_id
        elif source_id is not None:
            doc_id = source_id
        elif content is not None:
            doc_id, derived = derived_id(content), True
        else:
            return None
        # Positional, in the fields' order (doc_id, chunk_id, text, score, tenant, metadata,
        # id_derived): keywords cost a quarter of making one, and a trace makes several.
        return Context(
            doc_id,
            chunk_id or text(metadata.get("chunk_id")),
            content,
            number(doc.get("score")),
            text(metadata.get("tenant")),
            metadata,
            derived,
        )

    def _doc_id(self, doc: Mapping[str, Any]) -> str | None:
        """The source document id of a retrieved document, without building its context."""
        raw = doc.get("metadata")
        if self._may_name_source(raw):
            source_id = self._source_id(json_object(raw))
            if source_id is not None:
                return source_id
        own_id = doc.get("id")
        if usable_id(own_id):
            return str(own_id)
        content = text(doc.get("content"))
        return derived_id(content) if content is not None else None

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


def _first_of_each(contexts: Sequence[Context]) -> tuple[Context, ...]:
    """Each document (and chunk) once, where it first came: an agent that retrieves twice
    gave the generator the union of both results."""
    seen: set[tuple[str, str | None]] = set()
    unique = []
    for context in contexts:
        key = (context.doc_id, context.chunk_id)
        if key not in seen:
            seen.add(key)
            unique.append(context)
    return tuple(unique)


def _label_value(value: Any) -> str | None:
    """An attribute that becomes a label value: a string of bounded length, else nothing
    (a version of 10 kB is a producer's bug, not a release)."""
    value = text(value)
    return value if value is not None and len(value) <= MAX_RELEASE_ATTRIBUTE_LENGTH else None


def _instrumentation(request: Span, tree: SpanTree) -> str | None:
    """The request span's instrumentation scope, else the first span's that names one
    (an app's own root span may carry an empty scope name)."""
    return request.scope or next((span.scope for span in tree.spans if span.scope), None)


def _embedding_model(span: Span | None) -> str | None:
    """The model of the query vector's span: OpenInference's ``embedding.model_name``, else
    the GenAI conventions' ``gen_ai.request.model`` on an embeddings span."""
    if span is None or QUERY_VECTOR not in span.attributes:
        return None
    attributes = span.attributes
    return _label_value(attributes.get("embedding.model_name")) or _label_value(
        attributes.get("gen_ai.request.model")
    )


def _request_span(tree: SpanTree, named: Sequence[Span]) -> Span:
    """The span standing for the whole request: the shallowest of the spans named by
    ``request_span_names``, else of the CHAIN/AGENT spans, else of all (the root); the
    earliest started of equals."""
    kinds = tree.kinds
    candidates = (
        named
        or [span for span in tree.spans if kinds[span.span_id] in _REQUEST_KINDS]
        or tree.spans
    )
    if len(candidates) == 1:
        return candidates[0]
    depth = tree.depth
    return min(candidates, key=lambda span: (depth[span.span_id], span.start_ns))


def _merged_attributes(request: Span, tree: SpanTree) -> dict[str, Any]:
    """Attributes of all spans: the request span's win, then the earliest other span's."""
    merged: dict[str, Any] = {}
    for span in sorted(tree.spans, key=lambda s: s.start_ns, reverse=True):
        if span is not request:
            merged.update(span.attributes)
    merged.update(request.attributes)
    return merged
