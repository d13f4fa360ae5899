"""Conformance: a hand-written RAG app on the ``openai`` client, traced by
opentelemetry-instrumentation-openai-v2 (OTel GenAI semantic conventions, ``gen_ai.*``).

The app writes its own root span (``rag.tenant`` only) and an OpenInference
retriever span; the query and the answer exist only in the instrumentation's
``gen_ai.input.messages`` / ``gen_ai.output.messages``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import genai_prices
import pytest
from openai import OpenAI

from monitor.contract.trace import RagTrace, Usage
from tests.conformance.conftest import Conformance, instrumented
from tests.conformance.fake_openai import FakeOpenAI, Reply, embed
from tests.conformance.openai_app import (
    CHAT_MODEL,
    CORPUS,
    EMBEDDING_MODEL,
    Answer,
    RagApp,
    cosine,
)

pytestmark = pytest.mark.integration

TOP_K = 2


@dataclass(frozen=True)
class Ask:
    question: str
    tenant: str
    stream: bool


ASKS: tuple[Ask, ...] = (
    Ask("How long do refunds take?", "acme", stream=False),
    Ask("Where do I configure single sign-on?", "globex", stream=True),
    Ask("Do I need the VPN before opening the wiki?", "initech", stream=False),
    Ask("How often are lab access badges renewed?", "umbrella", stream=True),
)


@dataclass(frozen=True)
class Request:
    """One request as the app saw it, next to what the sidecar made of it."""

    ask: Ask
    answer: Answer
    chat: Reply
    query_embedding: Reply
    trace: RagTrace | None


@dataclass(frozen=True)
class Run:
    requests: tuple[Request, ...]
    traces: tuple[RagTrace, ...]
    conformance: Conformance


@pytest.fixture
def run(conformance: Conformance, fake_openai: FakeOpenAI, monkeypatch: pytest.MonkeyPatch) -> Run:
    """Index the corpus, serve ``ASKS`` through the instrumented app, collect the RagTraces."""
    # Read once when the instrumentor builds its handler, so it must precede instrument().
    # "true" is rejected on this path (it means NO_CONTENT); span attributes need SPAN_ONLY.
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    uninstrument = instrumented(OpenAIInstrumentor(), conformance.provider)
    try:
        client = OpenAI(base_url=fake_openai.base_url, api_key="sk-test")
        app = RagApp(client, conformance.provider.get_tracer("rag-app"), top_k=TOP_K)
        app.index()
        answers = [app.answer(ask.question, ask.tenant, stream=ask.stream) for ask in ASKS]
    finally:
        uninstrument()

    conformance.traces(len(ASKS))
    # Past the assembly grace period: a late duplicate or a counted index trace would show here.
    time.sleep(0.8)
    conformance.flush()
    traces = tuple(conformance.recorder.traces)
    by_id = {trace.trace_id: trace for trace in traces}

    replies = list(fake_openai.replies)
    assert [reply.kind for reply in replies] == ["embeddings"] + ["embeddings", "chat"] * len(ASKS)
    requests = tuple(
        Request(
            ask=ask,
            answer=answer,
            query_embedding=replies[1 + 2 * index],
            chat=replies[2 + 2 * index],
            trace=by_id.get(answer.trace_id),
        )
        for index, (ask, answer) in enumerate(zip(ASKS, answers, strict=True))
    )
    return Run(requests, traces, conformance)


def _trace(request: Request) -> RagTrace:
    assert request.trace is not None, f"no RagTrace for {request.ask} ({request.answer.trace_id})"
    return request.trace


def _expected_hits(ask: Ask) -> list[tuple[str, str, float]]:
    """(doc_id, text, score) the app's retriever ranks first, recomputed from the fake embedder."""
    query = embed(ask.question)
    ranked = sorted(
        (
            (doc.doc_id, doc.text, cosine(query, embed(doc.text)))
            for doc in CORPUS
            if doc.tenant == ask.tenant
        ),
        key=lambda hit: hit[2],
        reverse=True,
    )
    return ranked[:TOP_K]


def _usage(trace: RagTrace, model: str) -> Usage:
    found = [usage for usage in trace.usage if usage.model == model]
    assert len(found) == 1, f"usage for {model}: {trace.usage}"
    return found[0]


def test_one_rag_trace_per_request(run: Run) -> None:
    """Each request is exactly one RagTrace; the start-up corpus embedding counts as not_rag."""
    assert len(run.traces) == len(ASKS), [trace.trace_id for trace in run.traces]
    assert {trace.trace_id for trace in run.traces} == {
        request.answer.trace_id for request in run.requests
    }
    assert run.conformance.metric("rag_requests_total", source="otlp") == len(ASKS)
    assert run.conformance.metric("rag_monitor_assembled_traces_total", outcome="not_rag") >= 1
    assert all(trace.source == "otlp" for trace in run.traces)


def test_query_and_answer_from_gen_ai_messages(run: Run) -> None:
    """The query is the last user message, never the system prompt; the answer is what the app got."""
    for request in run.requests:
        trace = _trace(request)
        assert trace.query == request.ask.question
        assert trace.answer == request.answer.text
        assert trace.answer == request.chat.text


def test_contexts_retrieved_and_tenant(run: Run) -> None:
    """Contexts carry the retrieved doc ids, texts, scores and tenant; the root's tenant is kept."""
    for request in run.requests:
        trace = _trace(request)
        hits = _expected_hits(request.ask)
        assert trace.tenant == request.ask.tenant
        assert trace.retrieved == tuple(doc_id for doc_id, _, _ in hits)
        assert [(c.doc_id, c.text, c.tenant) for c in trace.contexts] == [
            (doc_id, text, request.ask.tenant) for doc_id, text, _ in hits
        ]
        assert [c.score for c in trace.contexts] == pytest.approx([score for *_, score in hits])


def test_stages(run: Run) -> None:
    """Embed, retrieve, generate and total are timed, and generation fits inside the request."""
    for request in run.requests:
        trace = _trace(request)
        assert {"embed", "retrieve", "generate", "total"} <= set(trace.stages), trace.stages
        assert 0 < trace.stages["generate"] <= trace.stages["total"]
        assert 0 < trace.stages["embed"] <= trace.stages["total"]
        # openai-v2 2.4b0 never reports stream chunks to util-genai, so the streamed
        # spans carry no gen_ai.response.time_to_first_chunk: nothing to map to ttft.


def test_usage_and_cost(run: Run) -> None:
    """Chat and query-embedding tokens equal what the model reported; cost is their genai-prices sum."""
    expected_cost = 0.0
    for request in run.requests:
        trace = _trace(request)
        chat = _usage(trace, CHAT_MODEL)
        assert (chat.provider, chat.prompt_tokens, chat.completion_tokens) == (
            "openai",
            request.chat.prompt_tokens,
            request.chat.completion_tokens,
        )
        embedding = _usage(trace, EMBEDDING_MODEL)
        assert embedding.embedding_tokens == request.query_embedding.prompt_tokens
        expected_cost += float(
            genai_prices.calc_price(
                genai_prices.Usage(
                    input_tokens=request.chat.prompt_tokens,
                    output_tokens=request.chat.completion_tokens,
                ),
                model_ref=CHAT_MODEL,
                provider_id="openai",
            ).total_price
        )
        expected_cost += float(
            genai_prices.calc_price(
                genai_prices.Usage(input_tokens=request.query_embedding.prompt_tokens),
                model_ref=EMBEDDING_MODEL,
                provider_id="openai",
            ).total_price
        )
    assert run.conformance.metric("rag_request_cost_usd_count") == len(ASKS)
    assert run.conformance.metric("rag_request_cost_usd_sum") == pytest.approx(expected_cost)
