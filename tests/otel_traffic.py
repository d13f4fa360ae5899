"""Real OpenTelemetry SDK traffic shaped like an OpenInference-instrumented RAG service."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.trace import Tracer, set_span_in_context

NS = 1_000_000_000


@dataclass
class RagRequest:
    """The stage durations (seconds) and attributes of one synthetic request."""

    start_ns: int
    embed_s: float = 0.01
    retrieve_s: float = 0.08
    rerank_s: float = 0.05
    generate_s: float = 0.9
    tenant: str = "acme"
    documents: Sequence[tuple[str, str]] = (("d1", "acme"), ("d2", "acme"))
    model: str = "gpt-4o"
    prompt_tokens: int = 900
    completion_tokens: int = 120
    ttft_s: float | None = None
    """with a value, the LLM span gets a ``first_token`` event this long after its start"""
    extra: dict[str, object] = field(default_factory=dict)
    doc_metadata: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    """more metadata per doc id (e.g. ``{"d2": {"locale": "en-GB"}}``), beside its tenant"""
    cost_usd: float | None = None
    """with a value, the LLM span carries it as ``llm.cost.total``"""
    tools: Sequence[tuple[str, str]] = ()
    """tool calls (name, result) an agent made before generating: TOOL spans, no time"""

    @property
    def total_s(self) -> float:
        return self.embed_s + self.retrieve_s + self.rerank_s + self.generate_s


def tracer_for(
    exporter: SpanExporter, name: str = "rag-service", version: str | None = None
) -> tuple[TracerProvider, Tracer]:
    """A tracer of the service ``name`` (``service.version`` ``version`` when given)."""
    attributes = {"service.name": name, **({"service.version": version} if version else {})}
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, provider.get_tracer("tests")


def document_attributes(
    prefix: str,
    documents: Sequence[tuple[str, str]],
    metadata: Mapping[str, Mapping[str, object]] | None = None,
) -> dict[str, object]:
    attributes: dict[str, object] = {}
    for index, (doc_id, tenant) in enumerate(documents):
        base = f"{prefix}.{index}.document"
        attributes[f"{base}.id"] = doc_id
        attributes[f"{base}.content"] = f"text of {doc_id}"
        attributes[f"{base}.score"] = 1.0 - index * 0.1
        extra = (metadata or {}).get(doc_id, {})
        attributes[f"{base}.metadata"] = json.dumps({"tenant": tenant, **extra})
    return attributes


def filter_attributes(
    *,
    probe_id: str | None = None,
    predicate: str | None = None,
    relevance_excluded: Sequence[str] = (),
    entitlement_excluded: Sequence[str] = (),
) -> dict[str, object]:
    """Root attributes of a probe replay and of the filters a request applied (``extra``)."""
    attributes: dict[str, object] = {
        "rag.filter.relevance_excluded": list(relevance_excluded),
        "rag.filter.entitlement_excluded": list(entitlement_excluded),
    }
    if probe_id is not None:
        attributes["rag.probe_id"] = probe_id
    if predicate is not None:
        attributes["rag.filter.predicate"] = predicate
    return attributes


def emit_rag_request(
    tracer: Tracer, request: RagRequest, child_tracer: Tracer | None = None
) -> str:
    """Emit one request as a CHAIN root with EMBEDDING, RETRIEVER, RERANKER and LLM children.

    With ``child_tracer`` the children go through another exporter than the root.
    Returns the trace id as hex.
    """
    children = child_tracer or tracer
    t = request.start_ns
    root = tracer.start_span(
        "rag.request",
        start_time=t,
        attributes={
            "openinference.span.kind": "CHAIN",
            "input.value": "what is the refund policy?",
            "output.value": "Refunds are possible within 30 days.",
            "rag.tenant": request.tenant,
            "session.id": "s1",
            **request.extra,
        },
    )
    context = set_span_in_context(root)
    stages = [
        (
            "embed",
            "EMBEDDING",
            request.embed_s,
            {"embedding.embeddings.0.embedding.vector": [0.1, 0.2, 0.3]},
        ),
        (
            "retrieve",
            "RETRIEVER",
            request.retrieve_s,
            document_attributes("retrieval.documents", request.documents, request.doc_metadata),
        ),
        (
            "rerank",
            "RERANKER",
            request.rerank_s,
            document_attributes(
                "reranker.output_documents", request.documents, request.doc_metadata
            ),
        ),
        (
            "generate",
            "LLM",
            request.generate_s,
            {
                "llm.model_name": request.model,
                "llm.provider": "openai",
                "llm.token_count.prompt": request.prompt_tokens,
                "llm.token_count.completion": request.completion_tokens,
                **({} if request.cost_usd is None else {"llm.cost.total": request.cost_usd}),
            },
        ),
    ]
    for name, kind, seconds, attributes in stages:
        if kind == "LLM":
            for tool, result in request.tools:
                tool_attributes = {
                    "openinference.span.kind": "TOOL",
                    "tool.name": tool,
                    "output.value": result,
                }
                children.start_span(
                    tool, context=context, start_time=t, attributes=tool_attributes
                ).end(end_time=t)
        span = children.start_span(
            name,
            context=context,
            start_time=t,
            attributes={"openinference.span.kind": kind, **attributes},
        )
        if kind == "LLM" and request.ttft_s is not None:
            span.add_event("first_token", timestamp=t + round(request.ttft_s * NS))
        span.end(end_time=t + round(seconds * NS))
        t += round(seconds * NS)
    root.end(end_time=t)
    return format(root.get_span_context().trace_id, "032x")


class MemoryExporter(SpanExporter):
    """Keeps finished spans, to encode them into OTLP payloads by hand."""

    def __init__(self) -> None:
        self.spans: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> object:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.spans.extend(spans)
        return SpanExportResult.SUCCESS
