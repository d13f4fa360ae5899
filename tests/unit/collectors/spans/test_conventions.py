"""Span mapping beyond OpenInference's common shapes: documents without ids, OpenLLMetry
(Traceloop), the GenAI retrieval conventions, judge and other non-stage span kinds, and
``mapping.document_attributes`` (README, "How spans map to the RagTrace")."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from collectors.spans.config import MappingConfig
from collectors.spans.kinds import span_kind
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span
from monitor.contract.trace import RagTrace

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
MS = 1_000_000


def span(span_id: str, parent: str | None, start_ms: int, end_ms: int, **attributes: Any) -> Span:
    """A span; ``kind=`` sets ``openinference.span.kind``."""
    kind = attributes.pop("kind", None)
    if kind is not None:
        attributes["openinference.span.kind"] = kind
    return Span(TRACE, span_id.ljust(16, "0"), parent and parent.ljust(16, "0"), span_id,
                start_ms * MS, end_ms * MS, attributes)  # fmt: skip


def built(spans: list[Span], mapping: MappingConfig | None = None) -> RagTrace:
    trace = TraceMapper(mapping).build(spans, "otlp")
    assert trace is not None
    return trace


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()[:16]


ROOT = span("a1", None, 0, 1000, kind="CHAIN", **{"input.value": "q?", "output.value": "a."})
LLM = span("c1", "a1", 500, 900, kind="LLM")


# --- documents without any id -------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        ({"id": "c9", "content": "one"}, ("c9", None, "one", False)),
        ({"content": "one", "metadata": '{"doc_id": "d1"}'}, ("d1", None, "one", False)),
        ({"content": "one", "metadata": '{"chunk_id": "d1#2"}'}, (sha("one"), "d1#2", "one", True)),
        ({"content": "one"}, (sha("one"), None, "one", True)),
        ({"id": True, "content": "one"}, (sha("one"), None, "one", True)),
        ({"score": 0.4}, None),
        ({"metadata": '{"tenant": "acme"}'}, None),
    ],
    ids=["own-id", "source-id-only", "chunk-id-only", "text-only", "unusable-id", "no-text",
         "metadata-only"],
)  # fmt: skip
def test_a_document_without_an_id_is_a_context_under_its_text_hash(
    document: dict[str, Any], expected: tuple[str, str | None, str, bool] | None
) -> None:
    """An id-less document keeps its text under sha256:<16 hex> of it (id_derived); a source
    id in its metadata still names it; one with neither id nor text is no evidence."""
    attributes = {f"retrieval.documents.0.document.{k}": v for k, v in document.items()}
    trace = built([ROOT, span("b1", "a1", 10, 90, kind="RETRIEVER", **attributes), LLM])
    found = [(c.doc_id, c.chunk_id, c.text, c.id_derived) for c in trace.contexts]
    assert found == ([] if expected is None else [expected])
    assert trace.retrieved == tuple(c.doc_id for c in trace.contexts)


def test_derived_ids_are_stable_and_tell_texts_apart() -> None:
    """The same text gets the same id in every trace, another text another id; the
    retriever's order is kept."""
    texts = ["Refunds take five days.", "Shipping is free.", "Refunds take five days."]
    attributes = {f"retrieval.documents.{i}.document.content": t for i, t in enumerate(texts)}
    retriever = span("b1", "a1", 10, 90, kind="RETRIEVER", **attributes)
    first, second = built([ROOT, retriever, LLM]), built([ROOT, retriever, LLM])
    assert [c.doc_id for c in first.contexts] == [sha(t) for t in texts]
    assert first.retrieved == second.retrieved
    assert len(set(first.retrieved)) == 2


def test_reranked_documents_without_ids_take_the_retrievers_by_their_text() -> None:
    """A reranker that reports only text and score: each document takes the id and metadata
    of the retriever document with the same text; retrieved keeps the retriever's order."""
    retriever = span("b1", "a1", 10, 50, kind="RETRIEVER", **{
        "retrieval.documents.0.document.id": "c1", "retrieval.documents.0.document.content": "one",
        "retrieval.documents.0.document.metadata": '{"tenant": "acme"}',
        "retrieval.documents.1.document.id": "c2", "retrieval.documents.1.document.content": "two",
        "retrieval.documents.1.document.metadata": '{"tenant": "globex"}',
    })  # fmt: skip
    reranker = span("b2", "a1", 50, 90, kind="RERANKER", **{
        "reranker.output_documents.0.document.content": "two",
        "reranker.output_documents.0.document.score": 0.9,
        "reranker.output_documents.1.document.content": "three",
    })  # fmt: skip
    trace = built([ROOT, retriever, reranker, LLM])
    assert [(c.doc_id, c.tenant, c.score, c.id_derived) for c in trace.contexts] == [
        ("c2", "globex", 0.9, False),
        (sha("three"), None, None, True),
    ]
    assert trace.retrieved == ("c1", "c2")


# --- OpenLLMetry (Traceloop) ----------------------------------------------------------------


def traceloop_spans(root_input: Any, root_output: Any) -> list[Span]:
    """The shapes opentelemetry-instrumentation-langchain 0.62 writes for an LCEL RAG chain."""
    documents = [
        {"page_content": "Refunds take five days.", "metadata": {"doc_id": "d1", "tenant": "t1"}},
        {"page_content": "Shipping is free.", "metadata": {"source": "faq.md"}},
    ]
    return [
        span("a1", None, 0, 1000, **{
            "traceloop.span.kind": "workflow", "gen_ai.operation.name": "invoke_agent",
            "traceloop.entity.input": json.dumps({"inputs": root_input, "tags": [], "metadata": {}}),
            "traceloop.entity.output": json.dumps({"outputs": root_output, "kwargs": {}}),
            "traceloop.association.properties.tenant": "acme",
        }),
        span("b0", "a1", 5, 95, **{
            "traceloop.span.kind": "task", "gen_ai.operation.name": "execute_task",
            "traceloop.entity.input": json.dumps({"inputs": "not the query"}),
        }),
        span("b1", "b0", 10, 90, **{
            "traceloop.span.kind": "task", "gen_ai.operation.name": "vector_db_retrieve",
            "traceloop.entity.input": json.dumps({"query": "How long do refunds take?"}),
            "traceloop.entity.output": json.dumps({"documents": documents, "count": 2}),
        }),
        span("c1", "a1", 100, 900, **{
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o-mini",
            "gen_ai.provider.name": "openai", "gen_ai.usage.input_tokens": 48,
            "gen_ai.usage.output_tokens": 18,
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "Five days."}]}]
            ),
        }),
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("root_input", "root_output", "query"),
    [
        ("How long, really?", "Five days, really.", "How long, really?"),
        ({"question": "How long, asked?"}, "Five days, really.", "How long, asked?"),
        ({"input": ""}, "Five days, really.", "How long do refunds take?"),
        ({"input": ""}, {"lc": 1}, "How long do refunds take?"),
    ],
    ids=["plain-input", "object-input", "streamed", "streamed-object-output"],
)
def test_openllmetry_langchain_spans_map_every_field(
    root_input: Any, root_output: Any, query: str
) -> None:
    """The workflow's wrapped input/output (else the retriever's query and the chat's
    messages), the retriever task's documents and stage, the association tenant, usage."""
    trace = built(traceloop_spans(root_input, root_output))
    assert trace.query == query
    expected_answer = root_output if isinstance(root_output, str) else "Five days."
    assert trace.answer == expected_answer
    assert trace.tenant == "acme"
    assert [(c.doc_id, c.text, c.tenant, c.id_derived) for c in trace.contexts] == [
        ("d1", "Refunds take five days.", "t1", False),
        (sha("Shipping is free."), "Shipping is free.", None, True),
    ]
    assert trace.stages["retrieve"] == pytest.approx(0.08)
    assert trace.stages["generate"] == pytest.approx(0.8)
    assert [(u.model, u.provider, u.prompt_tokens, u.completion_tokens) for u in trace.usage] == [
        ("gpt-4o-mini", "openai", 48, 18)
    ]


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        ({"gen_ai.usage.input_tokens": 48, "gen_ai.usage.output_tokens": 18,
          "llm.usage.total_tokens": 66}, [(48, 18)]),
        ({"gen_ai.usage.prompt_tokens": 48, "gen_ai.usage.completion_tokens": 18}, [(48, 18)]),
        ({"llm.usage.total_tokens": 66}, []),
    ],
    ids=["0.54", "semconv-ai-0.4", "total-only"],
)  # fmt: skip
def test_openllmetry_indexed_prompts_and_completions(
    usage: dict[str, int], expected: list[tuple[int, int]]
) -> None:
    """Before its GenAI messages (0.54 and older): an llm_request / llm.request.type chat span,
    the last indexed user prompt is the query, completion 0 the answer; a total without the
    split is not priced."""
    root = span("a1", None, 0, 1000, **{"traceloop.span.kind": "workflow"})
    chat = span("c1", "a1", 100, 900, **{
        "gen_ai.operation.name": "llm_request", "llm.request.type": "chat",
        "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "Context: ...",
        "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "How long?",
        "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "Five days.",
        **usage,
    })  # fmt: skip
    legacy = span("c2", "a1", 950, 990, **{
        "llm.request.type": "chat", "gen_ai.prompt.0.role": "user",
        "gen_ai.prompt.0.content": "second call",
    })  # fmt: skip
    trace = built([root, chat])
    assert (trace.query, trace.answer) == ("How long?", "Five days.")
    assert [(u.prompt_tokens, u.completion_tokens) for u in trace.usage] == expected
    assert span_kind(legacy) == "LLM"


def test_openllmetry_embedding_total_counts_as_embedding_tokens() -> None:
    """An embedding's total is its input: llm.usage.total_tokens counts as embedding tokens."""
    embedding = span("e1", "a1", 10, 20, **{
        "llm.request.type": "embedding", "gen_ai.request.model": "text-embedding-3-small",
        "llm.usage.total_tokens": 7,
    })  # fmt: skip
    trace = built([ROOT, embedding, LLM])
    assert [(u.model, u.embedding_tokens) for u in trace.usage] == [("text-embedding-3-small", 7)]
    assert trace.stages["embed"] == pytest.approx(0.01)


@pytest.mark.parametrize(
    ("attributes", "kind"),
    [
        ({"traceloop.span.kind": "workflow"}, "CHAIN"),
        ({"traceloop.span.kind": "agent"}, "AGENT"),
        ({"traceloop.span.kind": "tool"}, "TOOL"),
        ({"traceloop.span.kind": "task"}, ""),
        ({"traceloop.span.kind": "task", "gen_ai.operation.name": "vector_db_retrieve"}, "RETRIEVER"),
        ({"traceloop.span.kind": "workflow", "gen_ai.operation.name": "invoke_agent"}, "AGENT"),
        ({"traceloop.span.kind": "task", "gen_ai.operation.name": "execute_task"}, ""),
        ({"llm.request.type": "rerank"}, "RERANKER"),
        ({"gen_ai.operation.name": "retrieval"}, "RETRIEVER"),
        ({"gen_ai.operation.name": "invoke_workflow"}, "CHAIN"),
        ({"gen_ai.operation.name": "execute_tool", "traceloop.span.kind": "workflow"}, "TOOL"),
        ({"openinference.span.kind": "evaluator", "gen_ai.operation.name": "chat"}, "EVALUATOR"),
    ],
    ids=lambda value: str(value) if isinstance(value, str) else "-".join(map(str, value.values())),
)  # fmt: skip
def test_span_kind_by_convention(attributes: dict[str, str], kind: str) -> None:
    """OpenInference's kind wins, then the GenAI operation, Traceloop's span kind, and its
    llm.request.type; a Traceloop task of no known operation has no kind."""
    assert span_kind(span("s1", None, 0, 1, **attributes)) == kind


# --- the OpenTelemetry GenAI retrieval conventions ------------------------------------------


@pytest.mark.parametrize("encoded", [True, False], ids=["json-text", "otlp-array"])
def test_gen_ai_retrieval_span_gives_query_documents_and_data_source(encoded: bool) -> None:
    """A retrieval operation is the retriever: gen_ai.retrieval.query.text the query,
    gen_ai.retrieval.documents its documents (keys beside id and score are metadata), and
    gen_ai.data_source.id goes into each document's metadata as data_source_id."""
    hits = [
        {"id": "c1", "score": 0.93, "content": "Refunds take five days.", "source_id": "policy"},
        {"id": "c2", "score": 0.71, "content": "Shipping is free.", "tenant": "acme"},
    ]
    root = span("a1", None, 0, 1000)
    retrieval = span("b1", "a1", 10, 60, **{
        "gen_ai.operation.name": "retrieval", "gen_ai.data_source.id": "kb-7",
        "gen_ai.retrieval.query.text": "How long do refunds take?",
        "gen_ai.retrieval.documents": json.dumps(hits) if encoded else hits,
    })  # fmt: skip
    chat = span("c1", "a1", 60, 900, **{"gen_ai.operation.name": "chat"})
    trace = built([root, retrieval, chat])
    assert trace.query == "How long do refunds take?"
    assert [(c.doc_id, c.chunk_id, c.score, c.tenant) for c in trace.contexts] == [
        ("policy", "c1", 0.93, None),
        ("c2", None, 0.71, "acme"),
    ]
    assert [c.metadata["data_source_id"] for c in trace.contexts] == ["kb-7", "kb-7"]
    assert trace.retrieved == ("policy", "c2")
    assert trace.stages["retrieve"] == pytest.approx(0.05)


# --- span kinds that are no stage or request -------------------------------------------------


def llm(span_id: str, parent: str, start: int, end: int, *, model: str, answer: str) -> Span:
    return span(span_id, parent, start, end, kind="LLM", **{
        "llm.model_name": model, "llm.token_count.prompt": 10, "llm.token_count.completion": 2,
        "llm.cost.total": 0.5, "llm.output_messages.0.message.content": answer,
        "llm.input_messages.0.message.role": "user",
        "llm.input_messages.0.message.content": f"asked {model}",
        "llm.time_to_first_token": 0.01 if model == "judge" else 0.2,
    })  # fmt: skip


@pytest.mark.parametrize("judge_kind", ["EVALUATOR", "GUARDRAIL"])
def test_an_llm_call_inside_a_judge_is_no_generation_but_is_paid_for(judge_kind: str) -> None:
    """A judge's LLM call (an input guard before, an evaluator after the generation) is not
    the query, the answer, the generate stage or ttft; its tokens and cost count."""
    root = span("a1", None, 0, 1000, kind="CHAIN")
    before = span("j1", "a1", 0, 100, kind=judge_kind)
    after = span("j2", "a1", 600, 1000, kind=judge_kind)
    trace = built([
        root, before, llm("j3", "j1", 10, 90, model="judge", answer="SAFE"),
        llm("c1", "a1", 100, 600, model="generator", answer="Five days."),
        after, llm("j4", "j2", 610, 990, model="judge", answer="FAITHFUL"),
    ])  # fmt: skip
    assert (trace.query, trace.answer) == ("asked generator", "Five days.")
    assert trace.stages["generate"] == pytest.approx(0.5)
    assert trace.stages["ttft"] == pytest.approx(0.2)
    assert [u.model for u in trace.usage] == ["judge", "generator", "judge"]
    assert trace.cost_usd == pytest.approx(1.5)


def test_a_guardrail_around_the_only_llm_call_holds_the_generation() -> None:
    """guardrails-ai wraps the model call it validates: with no call outside a guardrail,
    the guarded call is the generation."""
    root = span("a1", None, 0, 1000, kind="CHAIN")
    guard = span("g1", "a1", 100, 900, kind="GUARDRAIL")
    trace = built([root, guard, llm("c1", "g1", 110, 890, model="generator", answer="Five days.")])
    assert trace.answer == "Five days."
    assert trace.stages["generate"] == pytest.approx(0.78)


def test_a_trace_of_only_evaluations_is_not_a_rag_request() -> None:
    """An evaluation job (EVALUATOR spans around LLM judges) maps to no RagTrace."""
    evaluator = span("e1", None, 0, 1000, kind="EVALUATOR", **{"input.value": "q"})
    assert (
        TraceMapper().build(
            [evaluator, llm("j1", "e1", 10, 90, model="judge", answer="ok")], "otlp"
        )
        is None
    )


def test_prompt_and_tool_spans_are_no_query_answer_or_stage() -> None:
    """A PROMPT template span and a TOOL span hold text that is neither query nor answer and
    time that is no stage; a retriever inside a tool still retrieves."""
    root = span("a1", None, 0, 1000, kind="AGENT")
    prompt = span("p1", "a1", 0, 10, kind="PROMPT", **{
        "input.value": "template vars", "output.value": "rendered prompt",
    })  # fmt: skip
    tool = span("t1", "a1", 10, 100, kind="TOOL", **{
        "input.value": "tool input", "output.value": "tool output",
    })  # fmt: skip
    retriever = span("b1", "t1", 20, 90, kind="RETRIEVER", **{
        "retrieval.documents.0.document.id": "d1", "retrieval.documents.0.document.content": "x",
    })  # fmt: skip
    chat = llm("c1", "a1", 100, 900, model="generator", answer="Five days.")
    trace = built([root, prompt, tool, retriever, chat])
    assert (trace.query, trace.answer) == ("asked generator", "Five days.")
    assert trace.stages.keys() == {"total", "retrieve", "generate", "ttft"}
    assert trace.retrieved == ("d1",)


def test_an_agent_that_retrieves_twice_has_both_results_in_order() -> None:
    """Both retrievals' documents are contexts, in retrieval start order whatever the span
    order; the retrieve stage adds both up."""
    root = span("a1", None, 0, 1000, kind="AGENT", **{"input.value": "q", "output.value": "a"})

    def retriever(span_id: str, start: int, *ids: str) -> Span:
        return span(span_id, "a1", start, start + 50, kind="RETRIEVER", **{
            f"retrieval.documents.{i}.document.id": doc_id for i, doc_id in enumerate(ids)
        } | {f"retrieval.documents.{i}.document.content": doc_id for i, doc_id in enumerate(ids)})  # fmt: skip

    first, second = retriever("b1", 100, "d1", "d2"), retriever("b2", 400, "d3")
    trace = built([second, llm("c1", "a1", 500, 900, model="generator", answer="a"), root, first])
    assert trace.retrieved == ("d1", "d2", "d3")
    assert [c.doc_id for c in trace.contexts] == ["d1", "d2", "d3"]
    assert trace.stages["retrieve"] == pytest.approx(0.1)


# --- mapping.document_attributes -------------------------------------------------------------

HITS = "acme.retrieval.hits"


def acme_spans(search_attributes: dict[str, Any], start: int = 10) -> list[Span]:
    """A root with plain input/output values, a "search" span carrying documents under an
    attribute of its own, and a GenAI chat span."""
    root = span("a1", None, 0, 1000, **{"input.value": "q?", "output.value": "a."})
    search = span("b1", "a1", start, start + 40, **search_attributes)
    chat = span("c1", "a1", 100, 900, **{"gen_ai.operation.name": "chat"})
    return [root, search, chat]


@pytest.mark.parametrize(
    "attributes",
    [
        {HITS: '[{"id": "d1", "text": "Refunds take five days."}, {"id": "d2", "text": "Free."}]'},
        {HITS: [{"id": "d1", "text": "Refunds take five days."}, {"id": "d2", "text": "Free."}]},
        {f"{HITS}.0.id": "d1", f"{HITS}.0.text": "Refunds take five days.",
         f"{HITS}.1.document.id": "d2", f"{HITS}.1.document.content": "Free."},
    ],
    ids=["json-text", "otlp-array", "indexed-family"],
)  # fmt: skip
def test_document_attributes_make_unknown_documents_contexts(attributes: dict[str, Any]) -> None:
    """Documents under an attribute the mapping does not know: no contexts by default; with
    the attribute in mapping.document_attributes, contexts and a retrieve stage."""
    spans = acme_spans(attributes)
    assert MappingConfig().document_attributes == []
    unseen = built(spans)
    assert (unseen.contexts, unseen.retrieved, "retrieve" in unseen.stages) == ((), (), False)
    seen = built(spans, MappingConfig(document_attributes=["other.docs", HITS]))
    assert [(c.doc_id, c.text) for c in seen.contexts] == [
        ("d1", "Refunds take five days."),
        ("d2", "Free."),
    ]
    assert seen.retrieved == ("d1", "d2")
    assert seen.stages["retrieve"] == pytest.approx(0.04)


def test_document_attributes_on_several_spans_come_in_span_start_order() -> None:
    """Two spans holding documents under a configured attribute: the earlier span's first."""
    late = acme_spans({HITS: '[{"id": "late", "content": "b"}]'}, start=50)
    early = span("b0", "a1", 5, 45, **{HITS: '[{"id": "early", "content": "a"}]'})
    trace = built([*late, early], MappingConfig(document_attributes=[HITS]))
    assert trace.retrieved == ("early", "late")
