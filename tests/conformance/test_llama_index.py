"""Conformance: a LlamaIndex RAG app traced by openinference-instrumentation-llama-index.

The app (``llama_index_app``) builds a vector index over five documents, then
answers plain and streaming queries through retriever, reranker and LLM; every
expected value below is what the app itself saw for that query.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import genai_prices
import pytest
from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

from monitor.contract.trace import RagTrace
from tests.conformance.conftest import Conformance, instrumented
from tests.conformance.llama_index_app import (
    LLM_MODEL,
    QUESTIONS,
    RERANK_MODEL,
    Answered,
    HashEmbedding,
    RagApp,
)

# The reranker is not in the genai-prices table; price it by override.
RERANK_PER_KUNIT = 2.0
SIDECAR_CONFIG = {
    "detectors": {"cost": {"overrides": {RERANK_MODEL: {"rerank_per_kunit": RERANK_PER_KUNIT}}}}
}

pytestmark = [
    pytest.mark.integration,
    pytest.mark.parametrize("conformance", [SIDECAR_CONFIG], indirect=True, ids=["rerank-priced"]),
]

# Beyond the awaited count, long enough for a duplicate or a split trace to arrive.
SETTLE_S = 1.0


@dataclass(frozen=True)
class Run:
    answered: list[Answered]
    traces: list[RagTrace]

    def pairs(self) -> Iterator[tuple[Answered, RagTrace]]:
        # Queries run one after another, so trace start times follow query order.
        return iter(zip(self.answered, self.traces, strict=True))


def run_app(conformance: Conformance) -> Run:
    uninstrument = instrumented(LlamaIndexInstrumentor(), conformance.provider)
    try:
        # Instrumented before the index is built: its traces reach the sidecar too.
        app = RagApp()
        answered = [
            app.ask(question, tenant, streaming) for question, tenant, streaming in QUESTIONS
        ]
    finally:
        uninstrument()
    for a in answered:
        doc_ids = [n.node.ref_doc_id for n in a.retrieved]
        assert len(set(doc_ids)) == len(doc_ids), f"app precondition: distinct docs {doc_ids}"
    conformance.traces(len(answered))
    time.sleep(SETTLE_S)
    return Run(answered, conformance.traces(len(answered)))


def test_one_trace_per_query(conformance: Conformance) -> None:
    """Each query is exactly one RAG request; the index build is counted as not RAG."""
    run = run_app(conformance)
    assert len(run.traces) == len(run.answered)
    assert conformance.metric("rag_requests_total", source="otlp") == len(run.answered)
    assert conformance.metric("rag_monitor_assembled_traces_total", outcome="not_rag") >= 1


def test_query_and_answer(conformance: Conformance) -> None:
    """The question and the exact answer text the app received, streamed or not."""
    run = run_app(conformance)
    for answered, trace in run.pairs():
        assert trace.query == answered.question
        assert trace.answer == answered.answer
        assert "<generator" not in (trace.answer or "")


def test_contexts(conformance: Conformance) -> None:
    """Contexts are the reranked chunks: source doc id, node id, node text, doc tenant."""
    run = run_app(conformance)
    for answered, trace in run.pairs():
        expected = [
            (n.node.ref_doc_id, n.node_id, n.node.get_content(), n.node.metadata["tenant"])
            for n in answered.source_nodes
        ]
        actual = [(c.doc_id, c.chunk_id, c.text, c.tenant) for c in trace.contexts]
        assert actual == expected, answered.question


def test_retrieved_and_tenant(conformance: Conformance) -> None:
    """Retrieved source doc ids in retrieval order, and the caller's tenant."""
    run = run_app(conformance)
    for answered, trace in run.pairs():
        assert trace.retrieved == tuple(n.node.ref_doc_id for n in answered.retrieved)
        assert trace.tenant == answered.tenant


def test_query_embedding(conformance: Conformance) -> None:
    """The query vector the embedding model returned, number for number (256 of them: the
    protobuf array is decoded as a whole)."""
    run = run_app(conformance)
    for answered, trace in run.pairs():
        expected = HashEmbedding()._get_query_embedding(answered.question)
        assert trace.query_embedding == tuple(expected), answered.question


def test_stages(conformance: Conformance) -> None:
    """Retrieve, rerank, generate and total timings; time to first token when streamed."""
    run = run_app(conformance)
    for answered, trace in run.pairs():
        stages = dict(trace.stages)
        assert {"retrieve", "rerank", "generate", "total"} <= stages.keys(), stages
        assert stages["generate"] <= stages["total"], stages
        if answered.streaming:
            assert "ttft" in stages, stages
            assert 0 < stages["ttft"] <= stages["total"], stages


def test_usage(conformance: Conformance) -> None:
    """LLM tokens counted once across the nested LLM spans; one rerank unit."""
    run = run_app(conformance)
    for answered, trace in run.pairs():
        llm = [u for u in trace.usage if u.model == LLM_MODEL]
        assert sum(u.prompt_tokens for u in llm) == answered.prompt_tokens, trace.usage
        assert sum(u.completion_tokens for u in llm) == answered.completion_tokens, trace.usage
        rerank = [u for u in trace.usage if u.model == RERANK_MODEL]
        assert sum(u.rerank_units for u in rerank) == 1, trace.usage


def test_cost(conformance: Conformance) -> None:
    """Per-request cost is the genai-prices LLM price plus the overridden rerank price."""
    run = run_app(conformance)
    expected = sum(
        float(
            genai_prices.calc_price(
                genai_prices.Usage(input_tokens=a.prompt_tokens, output_tokens=a.completion_tokens),
                model_ref=LLM_MODEL,
                provider_id="openai",
            ).total_price
        )
        + RERANK_PER_KUNIT / 1000
        for a in run.answered
    )
    for reason in ("unknown_model", "unpriced_unit", "no_usage"):
        assert conformance.metric("rag_cost_unpriced_requests_total", reason=reason) == 0, reason
    assert conformance.metric("rag_request_cost_usd_count") == len(run.answered)
    assert conformance.metric("rag_request_cost_usd_sum") == pytest.approx(expected, rel=1e-9)
    assert conformance.metric("rag_cost_requests_total", pricing="complete") == len(run.answered)
