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

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from collectors.otlp import DOCUMENT_KEYS, RERANKED_DOCUMENTS, RETRIEVED_DOCUMENTS, Span
from monitor.config import MappingConfig
from monitor.trace import Context, RagTrace, Source, Usage

_KIND = "openinference.span.kind"
# A tuple, not ``int | float``: that expression builds a union object on every
# call, and these checks run for every document of every trace.
_NUMBER_TYPES = (int, float)
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
# What a framework writes when it traces a lazy value instead of the text.
_NOT_TEXT_PREFIXES = ("<generator object", "<async_generator object", "<coroutine object")


class TraceMapper:
    """Builds ``RagTrace`` values from assembled spans, as the ``mapping:`` config says."""

    def __init__(self, config: MappingConfig | None = None) -> None:
        config = config or MappingConfig()
        self._request_kinds = frozenset(config.request_kinds)
        self._query_pointers = tuple(map(_parse_pointer, config.query_pointers))
        self._answer_pointers = tuple(map(_parse_pointer, config.answer_pointers))
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
        for generation in _calls_counted_once(generations, spans):
            counted = _llm_usage(generation.attributes)
            # A wrapper span with no counts of its own reports nothing to price.
            if counted.prompt_tokens or counted.completion_tokens:
                usage.append(counted)
            cost = _number(generation.attributes.get("llm.cost.total"))
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
                retrieved if reranked is None else _with_retrieved_fields(reranked, retrieved),
            )
        )
        metadata = _json_object(attrs.get("metadata"))
        return RagTrace(
            trace_id=request.trace_id,
            time=datetime.fromtimestamp(request.start_ns / 1e9, tz=UTC),
            source=source,
            root_span_id=request.span_id,
            tenant=_text(attrs.get("rag.tenant"))
            or _text(metadata.get(self._tenant_key))
            or _text(request.resource.get(self._tenant_resource_attribute)),
            user_id=_text(attrs.get("user.id")),
            session_id=_text(attrs.get("session.id")),
            intent=_text(attrs.get("rag.intent")),
            query=query,
            answer=self._answer(request, generations),
            contexts=contexts,
            retrieved=tuple(context.doc_id for context in contexts)
            if reranked is None
            else tuple(map(self._doc_id, retrieved)),
            relevance_excluded=_text_list(attrs.get("rag.filter.relevance_excluded")),
            entitlement_excluded=_text_list(attrs.get("rag.filter.entitlement_excluded")),
            filter_predicate=_text(attrs.get("rag.filter.predicate")),
            stages=stages,
            usage=tuple(usage),
            cost_usd=sum(costs) if costs else None,
            query_embedding=_vector(embedding_span.attributes.get(_QUERY_VECTOR))
            if embedding_span is not None
            else None,
            probe_id=_text(attrs.get("rag.probe_id")),
            metadata=metadata,
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
        plain, document = _io_value(request.attributes, "input")
        found = plain or _first_pointer(document, self._query_pointers)
        if found is None and embedding_span is not None:
            found = _answer_text(embedding_span.attributes.get(_QUERY_TEXT))
        for retriever in retrievers:
            if found is not None:
                return found
            plain, document = _io_value(retriever.attributes, "input")
            found = plain or _first_pointer(document, self._query_pointers)
        for generation in generations:
            if found is not None:
                return found
            found = _last_user_message(generation.attributes)
        return found

    def _answer(self, request: Span, generations: Sequence[Span]) -> str | None:
        """Plain request output, else a JSON pointer into it, else the final generation's text."""
        plain, document = _io_value(request.attributes, "output")
        if plain is not None:
            return plain
        found = _first_pointer(document, self._answer_pointers)
        if found is not None:
            return found
        for generation in sorted(generations, key=lambda s: s.end_ns, reverse=True):
            text = _generated_text(generation.attributes)
            if text is not None:
                return text
        return None

    def _context(self, doc: Mapping[str, Any]) -> Context:
        metadata = _json_object(doc.get("metadata"))
        span_id = str(doc["id"])
        source_id = self._source_id(metadata)
        return Context(
            doc_id=source_id or span_id,
            chunk_id=span_id if source_id is not None else _text(metadata.get("chunk_id")),
            text=_text(doc.get("content")),
            score=_number(doc.get("score")),
            tenant=_text(metadata.get("tenant")),
            metadata=metadata,
        )

    def _doc_id(self, doc: Mapping[str, Any]) -> str:
        """The source document id of a retrieved document, without building its context."""
        raw = doc.get("metadata")
        if isinstance(raw, str) and self._names_doc_id(raw) is None:
            return str(doc["id"])
        return self._source_id(_json_object(raw)) or str(doc["id"])

    def _source_id(self, metadata: Mapping[str, Any]) -> str | None:
        """The first ``doc_id_keys`` value in the parsed metadata."""
        for key in self._doc_id_keys:
            value = metadata.get(key)
            if value is not None and _usable_id(value):
                return str(value)
        return None

    def _time_to_first_token(self, span: Span, kind: str) -> float | None:
        for event in span.events:
            if event.name in self._first_token_events and event.time_ns >= span.start_ns:
                return (event.time_ns - span.start_ns) / 1e9
        if kind == "LLM":
            return _number(span.attributes.get("llm.time_to_first_token"))
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
                found.retrieved.extend(_retrieved_documents(attributes))
            elif kind == "RERANKER":
                found.reranked = [
                    doc
                    for doc in _documents(attributes, RERANKED_DOCUMENTS)
                    if _usable_id(doc.get("id"))
                ]
                rerank_model = _text(attributes.get("reranker.model_name"))
                if rerank_model:
                    # Rerank APIs bill search units; one call is one unit unless the span says.
                    units = _count(attributes.get("rag.rerank.units")) or 1
                    found.usage.append(
                        Usage(rerank_model, _provider(attributes), rerank_units=units)
                    )
            elif kind == "EMBEDDING":
                if found.embedding is None and (
                    _QUERY_VECTOR in attributes or _QUERY_TEXT in attributes
                ):
                    found.embedding = span
                embedding_usage = _embedding_usage(attributes)
                if embedding_usage is not None:
                    found.usage.append(embedding_usage)
            else:
                found.generations.append(span)
        found.generations.sort(key=lambda s: (s.start_ns, s.end_ns))
        return found


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
    by_id = {span.span_id: span for span in spans}

    def depth(span: Span) -> int:
        level, parent = 0, span.parent_span_id
        while parent in by_id and level < len(spans):
            level, parent = level + 1, by_id[parent].parent_span_id
        return level

    candidates = [span for span in spans if kinds[span.span_id] in _REQUEST_KINDS] or spans
    if len(candidates) == 1:
        return candidates[0]
    return min(candidates, key=lambda span: (depth(span), span.start_ns))


def _calls_counted_once(generations: Sequence[Span], spans: Sequence[Span]) -> Sequence[Span]:
    """The generation spans whose usage counts: a wrapper span (LlamaIndex ``predict``
    around ``complete``) whose token counts equal the sum of its nested generation
    spans' reports the same calls again, so only the nested spans count."""
    if len(generations) < 2:
        return generations
    ids = {span.span_id for span in generations}
    parents = {span.span_id: span.parent_span_id for span in spans}
    nested: dict[str, list[Span]] = {}
    for span in generations:
        # The nearest generation ancestor, through spans of other kinds.
        parent = span.parent_span_id
        for _ in range(len(spans)):
            if parent is None or parent in ids:
                break
            parent = parents.get(parent)
        if parent in ids:
            nested.setdefault(parent, []).append(span)
    counted = []
    for span in generations:
        children = nested.get(span.span_id)
        if children and _tokens(span) == tuple(map(sum, zip(*map(_tokens, children), strict=True))):
            continue
        counted.append(span)
    return counted


def _tokens(span: Span) -> tuple[int, int]:
    usage = _llm_usage(span.attributes)
    return usage.prompt_tokens, usage.completion_tokens


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


def _retrieved_documents(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The retriever's documents: the OpenInference attributes, completed (or replaced)
    by the documents of its JSON ``output.value`` where those lack ids (LangChain)."""
    listed = _documents(attributes, RETRIEVED_DOCUMENTS)
    usable = [doc for doc in listed if _usable_id(doc.get("id"))]
    if listed and len(usable) == len(listed):
        return usable  # the common case
    if not listed or any("id" not in doc for doc in listed):
        _, output = _io_value(attributes, "output")
        from_output = _json_documents(output)
        if from_output:
            if len(from_output) == len(listed):
                listed = [
                    {**json_doc, **doc} for doc, json_doc in zip(listed, from_output, strict=True)
                ]
            else:
                listed = from_output
    return [doc for doc in listed if _usable_id(doc.get("id"))]


def _documents(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """The fields (``id``, ``content``, ...) of each listed document, in order, usable id
    or not."""
    fields: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        # One cached lookup per name instead of a prefix test and a lookup.
        document = DOCUMENT_KEYS[key]
        if document is not None and document[0] == prefix and document[2]:
            fields.setdefault(document[1], {})[document[2]] = value
    return [fields[index] for index in sorted(fields)]


def _json_documents(document: Any) -> list[dict[str, Any]]:
    """Documents in a JSON output: a list of objects, or an object holding one under
    ``documents`` (LangChain) or ``nodes``; ``page_content``/``text`` count as content."""
    if isinstance(document, dict):
        document = document.get("documents", document.get("nodes"))
    if not isinstance(document, list):
        return []
    found = []
    for item in document:
        if not isinstance(item, dict):
            continue
        found.append({
            "id": item.get("id", item.get("id_")),
            "content": item.get("content", item.get("page_content", item.get("text"))),
            "score": item.get("score"),
            "metadata": item.get("metadata", item.get("meta")),
        })  # fmt: skip
    return found


def _with_retrieved_fields(
    reranked: list[dict[str, Any]], retrieved: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Reranker outputs often keep only id, content and score (Haystack): the retriever
    document with the same id lends what is missing, its metadata (so its tenant) above all."""
    if not retrieved or all("metadata" in doc and "content" in doc for doc in reranked):
        return reranked
    by_id = {str(doc["id"]): doc for doc in retrieved}
    return [{**by_id.get(str(doc["id"]), {}), **doc} for doc in reranked]


def _usable_id(value: Any) -> bool:
    # Exact types: decoded attributes and JSON are never subclasses, and bool is not int here.
    kind = type(value)
    return kind is int or (kind is str and value != "")


def _io_value(attributes: Mapping[str, Any], which: str) -> tuple[str | None, Any]:
    """``input``/``output``: (the value when it is plain text, else None; its parsed JSON)."""
    value = attributes.get(f"{which}.value")
    if not isinstance(value, str) or not value:
        return None, None
    mime = attributes.get(f"{which}.mime_type")
    if mime == "text/plain":
        return _answer_text(value), None
    if mime is None and value[0] not in "[{":
        return _answer_text(value), None
    try:
        return None, orjson.loads(value)
    except orjson.JSONDecodeError:
        return (_answer_text(value) if mime is None else None), None


def _answer_text(value: Any) -> str | None:
    """``value`` when it is text, not the repr of a generator a framework had not read yet."""
    if not isinstance(value, str) or not value or value.startswith(_NOT_TEXT_PREFIXES):
        return None
    return value


def _parse_pointer(pointer: str) -> tuple[str, ...]:
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/"))


def _first_pointer(document: Any, pointers: Sequence[tuple[str, ...]]) -> str | None:
    if document is None:
        return None
    for pointer in pointers:
        node = document
        for part in pointer:
            if isinstance(node, dict):
                node = node.get(part)
            elif isinstance(node, list) and part.isdecimal() and int(part) < len(node):
                node = node[int(part)]
            else:
                node = None
                break
        text = _answer_text(node)
        if text is not None:
            return text
    return None


def _last_user_message(attributes: Mapping[str, Any]) -> str | None:
    """The last ``user`` message an LLM span was given (OpenInference or GenAI)."""
    found = None
    index = 0
    while (role := attributes.get(f"llm.input_messages.{index}.message.role")) is not None:
        if role == "user":
            found = _answer_text(attributes.get(f"llm.input_messages.{index}.message.content"))
        index += 1
    if found is not None:
        return found
    for message in reversed(_json_list(attributes.get("gen_ai.input.messages"))):
        if isinstance(message, dict) and message.get("role") == "user":
            return _message_text(message)
    return None


def _generated_text(attributes: Mapping[str, Any]) -> str | None:
    """The text an LLM span produced: output messages (OpenInference, GenAI), else a
    plain-text ``output.value``."""
    text = _answer_text(attributes.get("llm.output_messages.0.message.content"))
    if text is not None:
        return text
    for message in _json_list(attributes.get("gen_ai.output.messages")):
        if isinstance(message, dict):
            text = _message_text(message)
            if text is not None:
                return text
    plain, _ = _io_value(attributes, "output")
    return plain


def _message_text(message: Mapping[str, Any]) -> str | None:
    """Text of a GenAI message: its text ``parts`` joined, or a plain ``content``."""
    parts = message.get("parts")
    if isinstance(parts, list):
        texts = [
            part["content"]
            for part in parts
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("content"), str)
        ]
        return _answer_text("".join(texts))
    return _answer_text(message.get("content"))


def _llm_usage(attributes: Mapping[str, Any]) -> Usage:
    model = _text(attributes.get("llm.model_name")) or _text(
        attributes.get("gen_ai.response.model")
    ) or _text(attributes.get("gen_ai.request.model"))  # fmt: skip
    prompt = _count(attributes.get("llm.token_count.prompt"))
    completion = _count(attributes.get("llm.token_count.completion"))
    return Usage(
        model=model or "unknown",
        provider=_provider(attributes),
        prompt_tokens=prompt or _count(attributes.get("gen_ai.usage.input_tokens")),
        completion_tokens=completion or _count(attributes.get("gen_ai.usage.output_tokens")),
    )


def _embedding_usage(attributes: Mapping[str, Any]) -> Usage | None:
    model = (
        _text(attributes.get("embedding.model_name"))
        or _text(attributes.get("gen_ai.response.model"))
        or _text(attributes.get("gen_ai.request.model"))
    )
    tokens = (
        _count(attributes.get("llm.token_count.prompt"))
        or _count(attributes.get("llm.token_count.total"))
        or _count(attributes.get("gen_ai.usage.input_tokens"))
    )
    if model is None or not tokens:
        return None
    return Usage(model, _provider(attributes), embedding_tokens=tokens)


def _provider(attributes: Mapping[str, Any]) -> str | None:
    return (
        _text(attributes.get("llm.provider"))
        or _text(attributes.get("llm.system"))
        or _text(attributes.get("gen_ai.provider.name"))
        or _text(attributes.get("gen_ai.system"))
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _text_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # a producer that could not write a list attribute
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            value = [value]
    if not isinstance(value, list):
        return ()
    return tuple(str(item) for item in value if isinstance(item, str | int))


def _number(value: Any) -> float | None:
    if isinstance(value, _NUMBER_TYPES) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _vector(value: Any) -> tuple[float, ...] | None:
    if isinstance(value, list) and value and all(_number(item) is not None for item in value):
        return tuple(float(item) for item in value)
    return None


def _json_object(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def _json_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return []
        return parsed if isinstance(parsed, list) else []
    return []
