"""The OpenInference / gen_ai span mapping into RagTrace (README, "How spans map to the RagTrace")."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from pydantic import ValidationError

from collectors.spans.config import MappingConfig
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span, SpanEvent
from collectors.spans.tree import depths, nearest_marked_ancestors, top_down
from monitor.contract.trace import RagTrace

TRACE = "0af7651916cd43dd8448eb211c80319c"
build_trace = TraceMapper().build
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
    llm = span("a3", "a2", "LLM", 1210, 1290)
    trace = build_trace([inner_chain, http_root, chain, llm], "otlp")
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
    assert trace.usage == ()  # no usable token count
    assert trace.cost_usd is None
    assert trace.retrieved == ("7",)
    assert trace.contexts[0].metadata == {}
    assert trace.relevance_excluded == ("d1", "d2")  # a JSON-encoded list attribute


# --- shapes of real instrumentations (tests/conformance drives the frameworks themselves) ---


def _with(s: Span, **fields: Any) -> Span:
    return Span(**{**_fields(s), **fields})


def test_documents_without_ids_take_them_from_the_retriever_json_output() -> None:
    """LangChain: ids only in output.value; doc_id from metadata, the span's id is the chunk."""
    langchain_documents = {"documents": [
        {"id": "doc-7#2", "page_content": "blue sky", "metadata": {"doc_id": "doc-7", "tenant": "acme"}},
        {"id": "doc-3#0", "page_content": "red sunset", "metadata": {"doc_id": "doc-3", "tenant": "acme"}},
    ]}  # fmt: skip
    root = span(
        "a1", None, "CHAIN", 0 + 1, 100, **{"input.value": "why?", "output.value": "because"}
    )
    retriever = span("b1", "a1", "RETRIEVER", 2, 10, **{
        "retrieval.documents.0.document.content": "blue sky",
        "retrieval.documents.0.document.metadata": json.dumps({"doc_id": "doc-7", "tenant": "acme"}),
        "retrieval.documents.1.document.content": "red sunset",
        "retrieval.documents.1.document.metadata": json.dumps({"doc_id": "doc-3", "tenant": "acme"}),
        "output.value": json.dumps(langchain_documents), "output.mime_type": "application/json",
    })  # fmt: skip
    llm = span("c1", "a1", "LLM", 10, 90)
    trace = build_trace([root, retriever, llm], "otlp")
    assert trace is not None
    assert trace.retrieved == ("doc-7", "doc-3")
    assert [(c.doc_id, c.chunk_id, c.text, c.tenant) for c in trace.contexts] == [
        ("doc-7", "doc-7#2", "blue sky", "acme"),
        ("doc-3", "doc-3#0", "red sunset", "acme"),
    ]


def test_reranked_documents_inherit_the_retriever_metadata() -> None:
    """Haystack: reranker output has id, content and score only; tenant comes from the retriever."""
    root = span("a1", None, "CHAIN", 1, 100, **{"input.value": "q", "output.value": "a"})
    retriever = span("b1", "a1", "RETRIEVER", 2, 10, **{
        "retrieval.documents.0.document.id": "c1", "retrieval.documents.0.document.content": "one",
        "retrieval.documents.0.document.metadata": json.dumps({"doc_id": "d1", "tenant": "acme"}),
        "retrieval.documents.1.document.id": "c2", "retrieval.documents.1.document.content": "two",
        "retrieval.documents.1.document.metadata": json.dumps({"doc_id": "d2", "tenant": "globex"}),
    })  # fmt: skip
    reranker = span("b2", "a1", "RERANKER", 10, 20, **{
        "reranker.output_documents.0.document.id": "c2", "reranker.output_documents.0.document.score": 0.9,
    })  # fmt: skip
    trace = build_trace([root, retriever, reranker, span("c1", "a1", "LLM", 20, 90)], "otlp")
    assert trace is not None
    assert [(c.doc_id, c.chunk_id, c.text, c.tenant, c.score) for c in trace.contexts] == [
        ("d2", "c2", "two", "globex", 0.9)
    ]


def test_json_request_input_is_never_the_query() -> None:
    """Haystack: the pipeline's JSON input is not the query; the retriever's input is."""
    pipeline_input = {"data": {"retriever": {"query": "refunds?"}}}
    root = span("a1", None, "CHAIN", 1, 100, **{
        "input.value": json.dumps(pipeline_input), "input.mime_type": "application/json",
        "output.value": json.dumps({"llm": {"replies": ["ChatMessage(...)"]}}),
        "output.mime_type": "application/json",
    })  # fmt: skip
    retriever = span("b1", "a1", "RETRIEVER", 2, 10, **{
        "input.value": json.dumps({"query": "refunds?", "top_k": None}), "input.mime_type": "application/json",
    })  # fmt: skip
    llm = span("c1", "a1", "LLM", 10, 90, **{
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": "Context: ... Question: refunds?",
        "llm.output_messages.0.message.content": "Five days.",
    })  # fmt: skip
    trace = build_trace([root, retriever, llm], "otlp")
    assert trace is not None
    assert (trace.query, trace.answer) == ("refunds?", "Five days.")


def test_gen_ai_messages_give_query_and_answer_never_the_system_prompt() -> None:
    """OTel GenAI: the last user message is the query, the assistant's text parts the answer."""
    root = span("a1", None, None, 1, 100, **{"rag.tenant": "acme"})
    chat = span("c1", "a1", None, 10, 90, **{
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.input.messages": json.dumps([
            {"role": "system", "parts": [{"type": "text", "content": "Context: ..."}]},
            {"role": "user", "parts": [{"type": "text", "content": "How long?"}]},
        ]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": "Five "}, {"type": "text", "content": "days."}]}]),
    })  # fmt: skip
    trace = build_trace([root, chat], "otlp")
    assert trace is not None
    assert (trace.query, trace.answer, trace.tenant) == ("How long?", "Five days.", "acme")


def test_a_generator_repr_is_never_an_answer() -> None:
    """LlamaIndex streaming: the root output is a generator repr; the LLM span has the text."""
    root = span("a1", None, "CHAIN", 1, 100, **{
        "input.value": "q", "output.value": json.dumps({"response_gen": "<generator object>"}),
        "output.mime_type": "application/json",
    })  # fmt: skip
    outer = span("c1", "a1", "LLM", 10, 60)
    inner = span("c2", "c1", "LLM", 20, 50, **{"output.value": "streamed text"})
    trace = build_trace([root, outer, inner], "otlp")
    assert trace is not None
    assert trace.answer == "streamed text"


def test_nested_and_sequential_spans_of_a_stage_count_as_wall_clock() -> None:
    """Nested LLM spans count once, sequential ones add up, and generate never exceeds total."""
    root = span("a1", None, "CHAIN", 1000, 1100)
    predict = span("c1", "a1", "LLM", 1010, 1060)
    complete = span("c2", "c1", "LLM", 1020, 1059)
    second = span("c3", "a1", "LLM", 1070, 1200)  # ends after the request span
    trace = build_trace([root, predict, complete, second], "otlp")
    assert trace is not None
    assert trace.stages["generate"] == pytest.approx(0.050 + 0.030)
    assert trace.stages["generate"] <= trace.stages["total"]


@pytest.mark.parametrize(
    ("outer_tokens", "expected"),
    [
        ({}, [(71, 19)]),
        ({"llm.token_count.prompt": 71, "llm.token_count.completion": 19}, [(71, 19)]),
        ({"llm.token_count.prompt": 5, "llm.token_count.completion": 1}, [(5, 1), (71, 19)]),
    ],
    ids=["wrapper-without-counts", "wrapper-repeating-the-call", "wrapper-with-its-own-call"],
)
def test_nested_llm_spans_reporting_one_call_are_counted_once(
    outer_tokens: dict[str, int], expected: list[tuple[int, int]]
) -> None:
    """A wrapper whose counts equal its nested calls' sum reports those calls again."""
    root = span("a1", None, "CHAIN", 1, 100, **{"input.value": "q"})
    predict = span("c1", "a1", "LLM", 10, 60, **outer_tokens, **{"llm.model_name": "gpt-4o-mini"})
    chain = span("c2", "c1", "CHAIN", 12, 58)
    complete = span("c3", "c2", "LLM", 20, 50, **{
        "llm.model_name": "gpt-4o-mini", "llm.token_count.prompt": 71, "llm.token_count.completion": 19,
    })  # fmt: skip
    trace = build_trace([root, predict, chain, complete], "otlp")
    assert trace is not None
    assert [(u.prompt_tokens, u.completion_tokens) for u in trace.usage] == expected


def test_traces_without_generation_or_queried_retrieval_are_not_rag_requests() -> None:
    """Index building and embedding batches map to None, a retriever with a query does not."""
    splitter = span("a1", None, "CHAIN", 1, 100, **{"input.value": json.dumps({"nodes": []}),
                                                  "input.mime_type": "application/json"})  # fmt: skip
    batch = span("b1", None, "EMBEDDING", 1, 100, **{"embedding.model_name": "e"})
    search_root = span("c1", None, "CHAIN", 1, 100, **{"input.value": "find invoices"})
    search = span("c2", "c1", "RETRIEVER", 2, 50)
    assert build_trace([splitter], "otlp") is None
    assert build_trace([batch], "otlp") is None
    assert build_trace([search_root, search], "otlp") is not None
    anything = TraceMapper(MappingConfig(request_kinds=["CHAIN", "EMBEDDING"]))
    assert anything.build([batch], "otlp") is None  # no query
    assert anything.build([search_root], "otlp") is not None


def test_tenant_from_rag_tenant_then_metadata_then_resource() -> None:
    """rag.tenant wins; else the metadata JSON key; else the resource attribute."""
    llm = span("c1", "a1", "LLM", 10, 90)
    root = span("a1", None, "CHAIN", 1, 100, metadata=json.dumps({"tenant": "meta"}))
    assert _built([root, llm]).tenant == "meta"
    tagged = span(
        "a1", None, "CHAIN", 1, 100, **{"rag.tenant": "attr", "metadata": '{"tenant": "meta"}'}
    )
    assert _built([tagged, llm]).tenant == "attr"
    bare = _with(span("a1", None, "CHAIN", 1, 100), resource={"rag.tenant": "res"})
    assert _built([bare, llm]).tenant == "res"
    custom = TraceMapper(MappingConfig(tenant_metadata_key="org"))
    org_root = span("a1", None, "CHAIN", 1, 100, metadata=json.dumps({"org": "o1"}))
    assert (trace := custom.build([org_root, llm], "otlp")) is not None
    assert trace.tenant == "o1"


def test_release_attributes_come_from_the_request_resource() -> None:
    """service.name, service.version and deployment.environment: bounded strings, else None."""
    llm = span("c1", "a1", "LLM", 10, 90)
    resource = {
        "service.name": "rag-api",
        "service.version": "2.3.1",
        "deployment.environment": "prod",
    }
    trace = _built([_with(span("a1", None, "CHAIN", 1, 100), resource=resource), llm])
    assert (trace.service_name, trace.service_version, trace.deployment_environment) == (
        "rag-api",
        "2.3.1",
        "prod",
    )
    odd = {"service.name": "x" * 129, "service.version": 7, "deployment.environment": ""}
    trace = _built([_with(span("a1", None, "CHAIN", 1, 100), resource=odd), llm])
    assert (trace.service_name, trace.service_version, trace.deployment_environment) == (
        None,
        None,
        None,
    )
    assert _built([span("a1", None, "CHAIN", 1, 100), llm]).service_version is None


def test_variant_pair_and_query_vector_model_are_mapped() -> None:
    """rag.variant and rag.pair_id from any span; the query vector's model from its span's
    embedding.model_name, else gen_ai.request.model; an overlong variant is dropped."""
    llm = span("c1", "a1", "LLM", 10, 90)
    root = span("a1", None, "CHAIN", 1, 100, **{"rag.variant": "shadow", "rag.pair_id": "p-1"})
    vector = {"embedding.embeddings.0.embedding.vector": [0.1, 0.2]}
    named = span("e1", "a1", "EMBEDDING", 2, 5, **vector, **{"embedding.model_name": "enc-v2"})
    trace = _built([root, named, llm])
    assert (trace.variant, trace.pair_id, trace.query_embedding_model) == (
        "shadow",
        "p-1",
        "enc-v2",
    )
    genai = span("e1", "a1", "EMBEDDING", 2, 5, **vector, **{"gen_ai.request.model": "enc-v3"})
    assert _built([root, genai, llm]).query_embedding_model == "enc-v3"
    long_variant = span("a1", None, "CHAIN", 1, 100, **{"rag.variant": "v" * 129})
    trace = _built([long_variant, span("e1", "a1", "EMBEDDING", 2, 5, **vector), llm])
    assert (trace.variant, trace.pair_id, trace.query_embedding_model) == (None, None, None)


def test_first_token_event_names_are_configurable() -> None:
    """LlamaIndex's 'First Token Stream Event' counts by default; other names by config."""
    root = span("a1", None, "CHAIN", 1000, 2000)
    llm = span("c1", "a1", "LLM", 1100, 1900)
    llama = _with(llm, events=(SpanEvent("First Token Stream Event", 1150 * MS, {}),))
    assert _built([root, llama]).stages["ttft"] == pytest.approx(0.05)
    custom = _with(llm, events=(SpanEvent("token.first", 1300 * MS, {}),))
    assert "ttft" not in _built([root, custom]).stages
    mapper = TraceMapper(MappingConfig(first_token_events=["token.first"]))
    assert (trace := mapper.build([root, custom], "otlp")) is not None
    assert trace.stages["ttft"] == pytest.approx(0.2)


def test_custom_json_pointers_and_document_id_keys() -> None:
    """A team's own span shapes: pointers into the request JSON, its own source-id key."""
    mapper = TraceMapper(MappingConfig(
        query_pointers=["/request/text"], answer_pointers=["/reply/0"], doc_id_keys=["source"],
    ))  # fmt: skip
    root = span("a1", None, "CHAIN", 1, 100, **{
        "input.value": json.dumps({"request": {"text": "q?"}}), "input.mime_type": "application/json",
        "output.value": json.dumps({"reply": ["a."]}), "output.mime_type": "application/json",
    })  # fmt: skip
    retriever = span("b1", "a1", "RETRIEVER", 2, 10, **{
        "retrieval.documents.0.document.id": "c9",
        "retrieval.documents.0.document.metadata": json.dumps({"source": "manual.pdf"}),
    })  # fmt: skip
    trace = mapper.build([root, retriever, span("c1", "a1", "LLM", 10, 90)], "otlp")
    assert trace is not None
    assert (trace.query, trace.answer, trace.retrieved) == ("q?", "a.", ("manual.pdf",))
    assert trace.contexts[0].chunk_id == "c9"


@pytest.mark.parametrize(
    ("metadata", "doc_id", "chunk_id"),
    [
        (json.dumps({"doc_id": "manual.pdf", "chunk_id": "x"}), "manual.pdf", "c9"),
        ({"doc_id": "manual.pdf"}, "manual.pdf", "c9"),
        (json.dumps({"title": "doc_id", "chunk_id": "c9#1"}), "c9", "c9#1"),
        (json.dumps({"chunk_id": "c9#1"}), "c9", "c9#1"),
        ("not json, no id key", "c9", None),
    ],
    ids=["json-text-names-key", "map-names-key", "key-only-as-value", "no-key", "not-json"],
)
def test_source_id_from_metadata_text_or_map(
    metadata: Any, doc_id: str, chunk_id: str | None
) -> None:
    """A doc_id_keys entry in the metadata becomes the document id, whether the metadata is
    JSON text or a map; text that only mentions the name keeps the span's document id."""
    root = span("a1", None, "CHAIN", 1, 100, **{"input.value": "q", "output.value": "a"})
    retriever = span("b1", "a1", "RETRIEVER", 2, 10, **{
        "retrieval.documents.0.document.id": "c9",
        "retrieval.documents.0.document.metadata": metadata,
    })  # fmt: skip
    trace = _built([root, retriever, span("c1", "a1", "LLM", 10, 90)])
    assert trace.retrieved == (doc_id,)
    assert (trace.contexts[0].doc_id, trace.contexts[0].chunk_id) == (doc_id, chunk_id)


def test_a_json_pointer_must_start_with_a_slash() -> None:
    """mapping.query_pointers is validated at start-up with an RFC 6901 hint."""
    with pytest.raises(ValidationError, match="JSON pointer"):
        MappingConfig(query_pointers=["query"])


def _built(spans: list[Span]) -> RagTrace:
    trace = build_trace(spans, "otlp")
    assert trace is not None
    return trace


# --- the span tree: linear walks, no recursion ---------------------------------------------


def test_parents_come_before_children_and_a_parent_cycle_comes_last() -> None:
    """top_down puts every held parent first; spans on a parent cycle end the order."""
    spans = [
        span("c2", "c1", None, 1, 2), span("c1", "c2", None, 1, 2),  # a cycle: bad input
        span("b1", "a1", None, 1, 2), span("x1", "gone", None, 1, 2), span("a1", None, None, 1, 2),
    ]  # fmt: skip
    order = [s.span_id[:2] for s in top_down(spans)]
    assert order == ["x1", "a1", "b1", "c2", "c1"]
    assert depths(spans) == {s.span_id: d for s, d in zip(spans, [0, 1, 1, 0, 0], strict=True)}


def test_nearest_marked_ancestor_looks_through_unmarked_spans() -> None:
    """Each span maps to the nearest marked span above it, skipping spans of other kinds."""
    spans = [span("a1", None, None, 1, 2), span("b1", "a1", None, 1, 2),
             span("c1", "b1", None, 1, 2), span("d1", "c1", None, 1, 2)]  # fmt: skip
    ids = [s.span_id for s in spans]
    nearest = nearest_marked_ancestors(spans, {ids[0], ids[2]})
    assert nearest == {ids[1]: ids[0], ids[2]: ids[0], ids[3]: ids[2]}


def test_a_parent_cycle_maps_without_hanging() -> None:
    """Spans whose parents form a loop (bad input) are still mapped to one trace."""
    first = span("a1", "a2", "CHAIN", 1000, 2000, **{"input.value": "q"})
    second = span("a2", "a1", "CHAIN", 1100, 1900, **{"input.value": "q"})
    trace = _built([second, first, span("a3", "a2", "LLM", 1200, 1800)])
    assert trace.root_span_id in {first.span_id, second.span_id}
    assert trace.query == "q"


def test_a_50k_deep_chain_maps_without_recursion_in_seconds() -> None:
    """A 50,000-span chain of nested CHAIN and LLM spans maps in linear time (the quadratic
    request search took minutes) and counts the nested calls once."""
    spans = [
        span(
            f"{i + 1:016x}",
            f"{i:016x}" if i else None,
            "LLM" if i % 2 else "CHAIN",
            i,
            10**6 - i,
            **{"llm.token_count.prompt": 3} if i % 2 else {},
        )
        for i in range(50_000)
    ]
    started = time.perf_counter()
    trace = _built(spans)
    elapsed = time.perf_counter() - started
    assert trace.root_span_id == spans[0].span_id
    assert [usage.prompt_tokens for usage in trace.usage] == [3]
    assert elapsed < 5.0, f"{elapsed:.2f}s"
