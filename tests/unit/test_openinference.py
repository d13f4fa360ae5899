"""The OpenInference / gen_ai span mapping into RagTrace (DESIGN.md table)."""

from __future__ import annotations

import json
from typing import Any

from collectors.openinference import build_trace
from collectors.otlp import Span, SpanEvent

TRACE = "0af7651916cd43dd8448eb211c80319c"
MS = 1_000_000


def span(
    span_id: str,
    parent: str | None,
    kind: str | None,
    start_ms: int,
    end_ms: int,
    **attributes: Any,
) -> Span:
    if kind is not None:
        attributes["openinference.span.kind"] = kind
    return Span(TRACE, span_id.ljust(16, "0"), parent and parent.ljust(16, "0"), span_id,
                start_ms * MS, end_ms * MS, attributes)  # fmt: skip


def documents(prefix: str, *docs: tuple[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for i, (doc_id, tenant) in enumerate(docs):
        out[f"{prefix}.{i}.document.id"] = doc_id
        out[f"{prefix}.{i}.document.content"] = f"text {doc_id}"
        out[f"{prefix}.{i}.document.score"] = 0.9 - i / 10
        out[f"{prefix}.{i}.document.metadata"] = json.dumps({"tenant": tenant, "locale": "en-US"})
    return out


def rag_spans() -> list[Span]:
    return [
        span("a1", None, "CHAIN", 1000, 2100, **{
            "input.value": "q?", "output.value": "a.", "session.id": "s1", "user.id": "u1",
            "rag.tenant": "acme", "rag.intent": "billing", "rag.probe_id": "q17",
            "metadata": json.dumps({"release": "v2"}),
        }),
        span("b1", "a1", "EMBEDDING", 1000, 1011, **{"embedding.embeddings.0.embedding.vector": [0.5, -0.5]}),
        span("b2", "a1", "RETRIEVER", 1011, 1091, **documents("retrieval.documents", ("d1", "acme"), ("d2", "acme"), ("d3", "globex")),
             **{"rag.filter.predicate": "locale = 'en-US'", "rag.filter.relevance_excluded": ["d5", "d6"],
                "rag.filter.entitlement_excluded": ["d9"]}),
        span("b3", "a1", "RERANKER", 1091, 1141, **documents("reranker.output_documents", ("d2", "acme"), ("d1", "acme"))),
        span("b4", "a1", "LLM", 1141, 2041, **{
            "llm.model_name": "gpt-4o", "llm.provider": "openai", "llm.token_count.prompt": 900,
            "llm.token_count.completion": 120, "llm.cost.total": 0.0035,
        }),
    ]  # fmt: skip


def test_full_openinference_trace_maps_every_field() -> None:
    """Root CHAIN, EMBEDDING, RETRIEVER, RERANKER and LLM spans fill the RagTrace."""
    trace = build_trace(rag_spans(), "otlp")
    assert trace.trace_id == TRACE
    assert trace.root_span_id == "a1".ljust(16, "0")
    assert (trace.query, trace.answer) == ("q?", "a.")
    assert (trace.session_id, trace.user_id, trace.tenant, trace.intent) == (
        "s1",
        "u1",
        "acme",
        "billing",
    )
    assert trace.probe_id == "q17"
    assert trace.metadata == {"release": "v2"}
    assert trace.retrieved == ("d1", "d2", "d3")
    assert [c.doc_id for c in trace.contexts] == ["d2", "d1"]  # the reranked order
    assert trace.contexts[0].tenant == "acme"
    assert trace.contexts[0].metadata["locale"] == "en-US"
    assert trace.relevance_excluded == ("d5", "d6")
    assert trace.entitlement_excluded == ("d9",)
    assert trace.filter_predicate == "locale = 'en-US'"
    assert trace.query_embedding == (0.5, -0.5)
    assert trace.usage[0].model == "gpt-4o"
    assert (trace.usage[0].prompt_tokens, trace.usage[0].completion_tokens) == (900, 120)
    assert trace.cost_usd == 0.0035
    expected = {"total": 1.1, "embed": 0.011, "retrieve": 0.08, "rerank": 0.05, "generate": 0.9}
    assert trace.stages.keys() == expected.keys()
    for stage, seconds in expected.items():
        assert abs(trace.stages[stage] - seconds) < 1e-9


def test_without_reranker_contexts_are_the_retrieved_documents() -> None:
    """With no RERANKER span the retriever's documents are the contexts."""
    spans = [s for s in rag_spans() if s.attributes.get("openinference.span.kind") != "RERANKER"]
    trace = build_trace(spans, "otlp")
    assert [c.doc_id for c in trace.contexts] == ["d1", "d2", "d3"]
    assert "rerank" not in trace.stages


def test_time_to_first_token_from_event_or_attribute() -> None:
    """TTFT comes from the first_token event, else from llm.time_to_first_token."""
    llm = span("b4", "a1", "LLM", 1000, 2000)
    with_event = Span(**{**_fields(llm), "events": (SpanEvent("first_token", 1250 * MS, {}),)})
    root = span("a1", None, "CHAIN", 1000, 2000)
    assert build_trace([root, with_event], "otlp").stages["ttft"] == 0.25
    with_attribute = span("b4", "a1", "LLM", 1000, 2000, **{"llm.time_to_first_token": 0.4})
    assert build_trace([root, with_attribute], "otlp").stages["ttft"] == 0.4


def _fields(s: Span) -> dict[str, Any]:
    return {name: getattr(s, name) for name in Span.__dataclass_fields__}


def test_gen_ai_attributes_are_read() -> None:
    """An OTel GenAI span (no OpenInference kind) counts as the LLM stage with its tokens."""
    root = span("a1", None, "CHAIN", 0 + 1, 1001)
    chat = span("c1", "a1", None, 1, 501, **{
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "claude-x",
        "gen_ai.system": "anthropic", "gen_ai.usage.input_tokens": 50, "gen_ai.usage.output_tokens": 7,
    })  # fmt: skip
    trace = build_trace([root, chat], "otlp")
    assert trace.usage[0].model == "claude-x"
    assert trace.usage[0].provider == "anthropic"
    assert (trace.usage[0].prompt_tokens, trace.usage[0].completion_tokens) == (50, 7)
    assert trace.stages["generate"] == 0.5


def test_request_span_is_the_chain_under_a_foreign_root() -> None:
    """A non-OpenInference HTTP root: query, answer and total come from the top CHAIN span."""
    http_root = span("f1", None, None, 1000, 3000)
    chain = span("a1", "f1", "CHAIN", 1100, 2100, **{"input.value": "q", "output.value": "a"})
    inner_chain = span("a2", "a1", "CHAIN", 1200, 1300, **{"input.value": "sub"})
    trace = build_trace([inner_chain, http_root, chain], "otlp")
    assert trace.query == "q"
    assert trace.stages["total"] == 1.0


def test_wrong_attribute_types_are_ignored_not_trusted() -> None:
    """Attributes of unexpected types leave the field empty instead of failing."""
    root = span(
        "a1",
        None,
        "CHAIN",
        1,
        2,
        **{"input.value": 5, "rag.tenant": ["x"], "metadata": "{bad json"},
    )
    llm = span(
        "b1", "a1", "LLM", 1, 2, **{"llm.token_count.prompt": "many", "llm.cost.total": "cheap"}
    )
    retriever = span("b2", "a1", "RETRIEVER", 1, 2, **{
        "retrieval.documents.0.document.id": True, "retrieval.documents.1.document.id": 7,
        "retrieval.documents.1.document.metadata": "[1, 2]",
        "rag.filter.relevance_excluded": '["d1", "d2"]',
    })  # fmt: skip
    trace = build_trace([root, llm, retriever], "otlp")
    assert trace.query is None
    assert trace.tenant is None
    assert trace.metadata == {}
    assert trace.usage[0].prompt_tokens == 0
    assert trace.cost_usd is None
    assert trace.retrieved == ("7",)
    assert trace.contexts[0].metadata == {}
    assert trace.relevance_excluded == ("d1", "d2")  # a JSON-encoded list attribute
