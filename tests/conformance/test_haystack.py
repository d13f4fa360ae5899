"""Conformance: a Haystack RAG pipeline traced by openinference-instrumentation-haystack."""

from __future__ import annotations

import time
from dataclasses import dataclass

import pytest
from haystack import Document

from monitor.contract.trace import RagTrace
from tests.conformance.conftest import Conformance, instrumented
from tests.conformance.fake_openai import FakeOpenAI, Reply
from tests.conformance.haystack_app import MODEL, ask, build_pipeline, expected_documents

pytestmark = pytest.mark.integration

REQUESTS: tuple[tuple[str, str], ...] = (
    ("What is the refund policy for returns?", "acme"),
    ("How long does shipping to Europe take?", "globex"),
    ("How often must passwords be rotated?", "initech"),
    ("Is data encrypted at rest?", "umbrella"),
    ("What does the warranty cover?", "hooli"),
)
N = len(REQUESTS)
# Longer than the assembly grace period (0.3 s): a request split into several
# traces would show up as extra traces within it.
SETTLE_S = 0.5


@dataclass(frozen=True)
class Request:
    """What the app asked and got, and what the retriever and ranker returned for it."""

    question: str
    tenant: str
    answer: str
    retrieved: list[Document]
    ranked: list[Document]
    reply: Reply


@dataclass(frozen=True)
class Run:
    requests: list[Request]
    traces: list[RagTrace]
    conformance: Conformance


@pytest.fixture
def run(conformance: Conformance, fake_openai: FakeOpenAI) -> Run:
    """N requests through the instrumented pipeline, and the sidecar's traces of them."""
    from openinference.instrumentation.haystack import HaystackInstrumentor

    # Before instrumenting: traced component runs here would be extra traces.
    expected = [expected_documents(question) for question, _ in REQUESTS]
    pipeline = build_pipeline(fake_openai.base_url)
    uninstrument = instrumented(HaystackInstrumentor(), conformance.provider)
    try:
        answers = [ask(pipeline, question, tenant) for question, tenant in REQUESTS]
    finally:
        uninstrument()
    conformance.traces(N)
    time.sleep(SETTLE_S)
    traces = conformance.traces(N)
    chat = [reply for reply in fake_openai.replies if reply.kind == "chat"]
    assert len(chat) == N
    requests = [
        Request(question, tenant, answer, retrieved, ranked, reply)
        for (question, tenant), answer, (retrieved, ranked), reply in zip(
            REQUESTS, answers, expected, chat, strict=True
        )
    ]
    return Run(requests, traces, conformance)


def test_one_trace_per_request(run: Run) -> None:
    """Each pipeline run becomes exactly one RagTrace."""
    assert len(run.traces) == N
    assert run.conformance.metric("rag_requests_total", source="otlp") == N


def test_query_is_the_question(run: Run) -> None:
    """The query is the user's question, not the pipeline's JSON input."""
    assert [trace.query for trace in run.traces] == [r.question for r in run.requests]


def test_answer_is_the_reply_text(run: Run) -> None:
    """The answer is the reply text the app got, not a ChatMessage repr."""
    assert [trace.answer for trace in run.traces] == [r.answer for r in run.requests]
    assert [r.answer for r in run.requests] == [r.reply.text for r in run.requests]


def test_contexts_are_the_ranked_documents(run: Run) -> None:
    """Contexts are the ranker's output, with doc id, chunk id and tenant from the retrieved meta."""
    for trace, request in zip(run.traces, run.requests, strict=True):
        meta = {doc.id: doc.meta for doc in request.retrieved}
        actual = [(c.doc_id, c.chunk_id, c.text, c.tenant) for c in trace.contexts]
        expected = [
            (meta[doc.id]["doc_id"], doc.id, doc.content, meta[doc.id]["tenant"])
            for doc in request.ranked
        ]
        assert actual == expected
        assert [c.score for c in trace.contexts] == pytest.approx(
            [doc.score for doc in request.ranked]
        )


def test_retrieved_are_source_doc_ids(run: Run) -> None:
    """Retrieved lists the source document ids in retriever order."""
    for trace, request in zip(run.traces, run.requests, strict=True):
        assert list(trace.retrieved) == [doc.meta["doc_id"] for doc in request.retrieved]


def test_tenant_is_the_callers(run: Run) -> None:
    """The trace's tenant is the caller's, from using_attributes(metadata=...)."""
    assert [trace.tenant for trace in run.traces] == [r.tenant for r in run.requests]


def test_stages(run: Run) -> None:
    """Retrieve, rerank, generate and total are timed; generation fits in the total."""
    for trace in run.traces:
        assert {"retrieve", "rerank", "generate", "total"} <= set(trace.stages)
        assert 0 < trace.stages["generate"] <= trace.stages["total"]


def test_usage_matches_the_model(run: Run) -> None:
    """One chat-model usage with the tokens the model reported."""
    for trace, request in zip(run.traces, run.requests, strict=True):
        chat = [u for u in trace.usage if u.prompt_tokens or u.completion_tokens]
        assert len(chat) == 1
        assert (chat[0].model, chat[0].provider) == (MODEL, "openai")
        assert (chat[0].prompt_tokens, chat[0].completion_tokens) == (
            request.reply.prompt_tokens,
            request.reply.completion_tokens,
        )


def test_cost_from_the_price_table(run: Run) -> None:
    """Each request is priced from the genai-prices table for its tokens."""
    import genai_prices

    expected = sum(
        float(
            genai_prices.calc_price(
                genai_prices.Usage(
                    input_tokens=r.reply.prompt_tokens, output_tokens=r.reply.completion_tokens
                ),
                model_ref=MODEL,
                provider_id="openai",
            ).total_price
        )
        for r in run.requests
    )
    assert run.conformance.metric("rag_request_cost_usd_count") == N
    assert run.conformance.metric("rag_request_cost_usd_sum") == pytest.approx(expected)
