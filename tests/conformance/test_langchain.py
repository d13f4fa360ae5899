"""LangChain (LCEL) with openinference-instrumentation-langchain, end to end into the sidecar."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import genai_prices
import pytest
from langchain_core.documents import Document
from langchain_core.runnables import Runnable
from openinference.instrumentation.langchain import LangChainInstrumentor

from monitor.contract.trace import RagTrace, Usage
from tests.conformance.conftest import Conformance, instrumented
from tests.conformance.fake_openai import FakeOpenAI, Reply
from tests.conformance.langchain_app import (
    MODEL,
    ask,
    ask_streaming,
    build_chain,
    expected_documents,
)

pytestmark = pytest.mark.integration

# (question, caller tenant); the retrieved chunks belong to other tenants too.
REQUESTS: tuple[tuple[str, str], ...] = (
    ("How many days does the refund policy allow?", "acme"),
    ("When are invoices issued?", "initech"),
    ("Is data encrypted at rest?", "umbrella"),
    ("How long does shipping to Europe take?", "globex"),
    ("What does the warranty cover?", "hooli"),
)
N = len(REQUESTS)
# Longer than assembly grace (0.3 s) plus the batch delay (0.1 s): a split trace would show up.
SETTLE_S = 1.0

Ask = Callable[[Runnable[str, str], str, str, str], str]


@dataclass(frozen=True)
class Sent:
    """What the app sent and got back for one request."""

    question: str
    tenant: str
    answer: str
    documents: list[Document]


def run_requests(
    conformance: Conformance, fake_openai: FakeOpenAI, ask_fn: Ask
) -> tuple[list[Sent], list[RagTrace], list[Reply]]:
    expected = {question: expected_documents(question) for question, _ in REQUESTS}
    chain = build_chain(fake_openai.base_url)
    uninstrument = instrumented(LangChainInstrumentor(), conformance.provider)
    try:
        sent = [
            Sent(
                question,
                tenant,
                ask_fn(chain, question, tenant, f"session-{i}"),
                expected[question],
            )
            for i, (question, tenant) in enumerate(REQUESTS)
        ]
    finally:
        uninstrument()
    conformance.traces(N)
    time.sleep(SETTLE_S)
    # Requests ran one after another, so start time pairs traces and replies with requests.
    traces = sorted(conformance.recorder.traces, key=lambda trace: trace.time)
    replies = [reply for reply in fake_openai.replies if reply.kind == "chat"]
    assert len(traces) == N
    assert conformance.metric("rag_requests_total", source="otlp") == N
    assert len(replies) == N
    # A request without retrieved chunks would make the context checks vacuous.
    assert all(request.documents for request in sent)
    return sent, traces, replies


def check_request(trace: RagTrace, request: Sent, reply: Reply) -> None:
    assert trace.query == request.question
    assert trace.answer == request.answer
    assert trace.tenant == request.tenant
    assert [
        (context.doc_id, context.chunk_id, context.text, context.tenant)
        for context in trace.contexts
    ] == [
        (doc.metadata["doc_id"], doc.id, doc.page_content, doc.metadata["tenant"])
        for doc in request.documents
    ]
    assert list(trace.retrieved) == [doc.metadata["doc_id"] for doc in request.documents]
    assert {"retrieve", "generate", "total"} <= trace.stages.keys()
    assert 0 < trace.stages["generate"] <= trace.stages["total"]
    assert trace.usage == (
        Usage(
            model=MODEL,
            provider="openai",
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
        ),
    )


def check_cost(conformance: Conformance, replies: list[Reply]) -> None:
    expected = sum(
        float(
            genai_prices.calc_price(
                genai_prices.Usage(
                    input_tokens=reply.prompt_tokens, output_tokens=reply.completion_tokens
                ),
                model_ref=MODEL,
                provider_id="openai",
            ).total_price
        )
        for reply in replies
    )
    assert conformance.metric("rag_request_cost_usd_count") == N
    assert conformance.metric("rag_request_cost_usd_sum") == pytest.approx(expected, rel=1e-6)


def test_invoke_maps_each_request_field_by_field(
    conformance: Conformance, fake_openai: FakeOpenAI
) -> None:
    """Each `chain.invoke` becomes one RagTrace with its query, answer, contexts, tenant, usage and cost."""
    sent, traces, replies = run_requests(conformance, fake_openai, ask)
    assert not any(reply.streamed for reply in replies)
    for trace, request, reply in zip(traces, sent, replies, strict=True):
        check_request(trace, request, reply)
    check_cost(conformance, replies)


def test_stream_maps_each_request_without_inventing_ttft(
    conformance: Conformance, fake_openai: FakeOpenAI
) -> None:
    """Each `chain.stream` maps like `invoke`; no first-token event is emitted, so no ttft stage."""
    sent, traces, replies = run_requests(conformance, fake_openai, ask_streaming)
    assert all(reply.streamed for reply in replies)
    for trace, request, reply in zip(traces, sent, replies, strict=True):
        check_request(trace, request, reply)
        # openinference-instrumentation-langchain 0.1.80 records no token events on streamed
        # LLM spans; a ttft here would be made up. Revisit when it adds a first-token event.
        assert "ttft" not in trace.stages
    check_cost(conformance, replies)
