"""The spans of one trace -> ``RagTrace``, by the OpenInference (and OTel GenAI) conventions.

The mapping is the table of DESIGN.md. Attributes of an unexpected type are
ignored rather than trusted: a producer's typo must not crash a detector.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from collectors.otlp import DOCUMENT_KEYS, Span
from monitor.trace import Context, RagTrace, Source, Usage

_KIND = "openinference.span.kind"
# Tuples, not ``int | str``: that expression builds a union object on every
# call, and these checks run for every document of every trace.
_ID_TYPES = (int, str)
_NUMBER_TYPES = (int, float)
_REQUEST_KINDS = ("CHAIN", "AGENT")
_STAGE_OF_KIND = {
    "RETRIEVER": "retrieve",
    "RERANKER": "rerank",
    "EMBEDDING": "embed",
    "LLM": "generate",
}


def build_trace(spans: Sequence[Span], source: Source) -> RagTrace:
    """Build the ``RagTrace`` of one assembled trace (``spans`` share a trace id)."""
    request = _request_span(spans)
    stages: dict[str, float] = {"total": request.duration_s}
    retrieved: list[dict[str, Any]] = []
    reranked: list[dict[str, Any]] | None = None
    usage: list[Usage] = []
    cost: float | None = None
    embedding: tuple[float, ...] | None = None

    for span in spans:
        kind = _span_kind(span)
        stage = _STAGE_OF_KIND.get(kind)
        if stage is None or span is request:
            continue
        stages[stage] = stages.get(stage, 0.0) + span.duration_s
        attributes = span.attributes
        if kind == "RETRIEVER":
            retrieved.extend(_documents(attributes, "retrieval.documents."))
        elif kind == "RERANKER":
            reranked = _documents(attributes, "reranker.output_documents.")
            rerank_model = _text(attributes.get("reranker.model_name"))
            if rerank_model:
                # Rerank APIs bill search units; one call is one unit unless the span says.
                units = _count(attributes.get("rag.rerank.units")) or 1
                usage.append(Usage(rerank_model, _provider(attributes), rerank_units=units))
        elif kind == "EMBEDDING":
            if embedding is None:
                embedding = _vector(attributes.get("embedding.embeddings.0.embedding.vector"))
            embedding_usage = _embedding_usage(attributes)
            if embedding_usage is not None:
                usage.append(embedding_usage)
        elif kind == "LLM":
            usage.append(_llm_usage(attributes))
            span_cost = _number(attributes.get("llm.cost.total"))
            if span_cost is not None:
                cost = (cost or 0.0) + span_cost
            ttft = _time_to_first_token(span)
            if ttft is not None and "ttft" not in stages:
                stages["ttft"] = ttft

    attrs = _merged_attributes(request, spans)
    return RagTrace(
        trace_id=request.trace_id,
        time=datetime.fromtimestamp(request.start_ns / 1e9, tz=UTC),
        source=source,
        root_span_id=request.span_id,
        tenant=_text(attrs.get("rag.tenant")),
        user_id=_text(attrs.get("user.id")),
        session_id=_text(attrs.get("session.id")),
        intent=_text(attrs.get("rag.intent")),
        query=_text(request.attributes.get("input.value")),
        answer=_text(request.attributes.get("output.value")),
        # Contexts only of the documents the generator got: building them for
        # the retrieved ones too, when a reranker replaced those, costs time per trace.
        contexts=tuple(map(_context, retrieved if reranked is None else reranked)),
        retrieved=tuple(str(doc["id"]) for doc in retrieved),
        relevance_excluded=_text_list(attrs.get("rag.filter.relevance_excluded")),
        entitlement_excluded=_text_list(attrs.get("rag.filter.entitlement_excluded")),
        filter_predicate=_text(attrs.get("rag.filter.predicate")),
        stages=stages,
        usage=tuple(usage),
        cost_usd=cost,
        query_embedding=embedding,
        probe_id=_text(attrs.get("rag.probe_id")),
        metadata=_json_object(attrs.get("metadata")),
    )


def _span_kind(span: Span) -> str:
    kind = span.attributes.get(_KIND)
    if isinstance(kind, str):
        return kind.upper()
    # OTel GenAI instrumentations set no OpenInference kind.
    operation = span.attributes.get("gen_ai.operation.name")
    if operation == "embeddings":
        return "EMBEDDING"
    if operation is not None or "gen_ai.request.model" in span.attributes:
        return "LLM"
    return ""


def _request_span(spans: Sequence[Span]) -> Span:
    """The span standing for the whole request: the shallowest CHAIN/AGENT span, else the root."""
    by_id = {span.span_id: span for span in spans}

    def depth(span: Span) -> int:
        level, parent = 0, span.parent_span_id
        while parent in by_id and level < len(spans):
            level, parent = level + 1, by_id[parent].parent_span_id
        return level

    candidates = [span for span in spans if _span_kind(span) in _REQUEST_KINDS] or list(spans)
    return min(candidates, key=lambda span: (depth(span), span.start_ns))


def _merged_attributes(request: Span, spans: Sequence[Span]) -> dict[str, Any]:
    """Attributes of all spans, the request span's winning over its children's."""
    merged: dict[str, Any] = {}
    for span in sorted(spans, key=lambda s: s.start_ns, reverse=True):
        if span is not request:
            merged.update(span.attributes)
    merged.update(request.attributes)
    return merged


def _documents(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """The fields (``id``, ``content``, ...) of each listed document with a usable id, in order."""
    fields: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        if key.startswith(prefix):
            document = DOCUMENT_KEYS[key]
            if document is not None and document[2]:
                fields.setdefault(document[1], {})[document[2]] = value
    return [
        doc
        for _, doc in sorted(fields.items())
        if isinstance(doc.get("id"), _ID_TYPES) and not isinstance(doc["id"], bool)
    ]


def _context(doc: Mapping[str, Any]) -> Context:
    metadata = _json_object(doc.get("metadata"))
    return Context(
        doc_id=str(doc["id"]),
        chunk_id=_text(metadata.get("chunk_id")),
        text=_text(doc.get("content")),
        score=_number(doc.get("score")),
        tenant=_text(metadata.get("tenant")),
        metadata=metadata,
    )


def _llm_usage(attributes: Mapping[str, Any]) -> Usage:
    model = _text(attributes.get("llm.model_name")) or _text(attributes.get("gen_ai.request.model"))
    prompt = _count(attributes.get("llm.token_count.prompt"))
    completion = _count(attributes.get("llm.token_count.completion"))
    return Usage(
        model=model or "unknown",
        provider=_provider(attributes),
        prompt_tokens=prompt or _count(attributes.get("gen_ai.usage.input_tokens")),
        completion_tokens=completion or _count(attributes.get("gen_ai.usage.output_tokens")),
    )


def _embedding_usage(attributes: Mapping[str, Any]) -> Usage | None:
    model = _text(attributes.get("embedding.model_name")) or _text(
        attributes.get("gen_ai.request.model")
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


def _time_to_first_token(span: Span) -> float | None:
    for event in span.events:
        if event.name == "first_token" and event.time_ns >= span.start_ns:
            return (event.time_ns - span.start_ns) / 1e9
    return _number(span.attributes.get("llm.time_to_first_token"))


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
