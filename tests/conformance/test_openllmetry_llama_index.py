"""LlamaIndex with OpenLLMetry (Traceloop's opentelemetry-instrumentation-llamaindex): an
instrumentation no convention of the mapping covers, onboarded with ``rag-monitor inspect``.

The same app as ``test_llama_index.py`` (vector index, retriever, reranker, LLM; fake
models), traced dispatcher-style: one span per framework call, named after the class
(``VectorIndexRetriever.task``), its arguments and result as JSON under
``traceloop.entity.input``/``output``. The retriever's documents are a list of
JSON-encoded nodes in its output, the LLM's token counts sit in the raw response inside
the LLM call's output, and neither span names a kind. Out of the box the monitor cannot
read these traces as requests and says so (field coverage); what ``inspect`` prints,
pasted into the config, makes every field right for every request.

Only plain queries: with a streamed answer the instrumentation never ended the request
span in our runs (the other spans came without their root).
"""

from __future__ import annotations

import time
from pathlib import Path

import genai_prices
import pytest
from llama_index.core.instrumentation import get_dispatcher
from opentelemetry.instrumentation.llamaindex import LlamaIndexInstrumentor
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from monitor.contract.names import FIELDS_TOTAL
from monitor.contract.trace import RagTrace, Usage
from tests.conformance.conftest import Conformance, running_sidecar
from tests.conformance.llama_index_app import (
    LLM_MODEL,
    QUESTIONS,
    RERANK_MODEL,
    Answered,
    RagApp,
)
from tests.conformance.onboarding import inspect_snippet, otlp_file
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

SCOPE = "opentelemetry.instrumentation.llamaindex"
PLAIN = [(question, tenant) for question, tenant, _ in QUESTIONS]
N = len(PLAIN)
RERANK_PER_KUNIT = 2.0  # the reranker is not in the genai-prices table
PRICED = {
    "detectors": {"cost": {"overrides": {RERANK_MODEL: {"rerank_per_kunit": RERANK_PER_KUNIT}}}}
}
SETTLE_S = 1.0  # beyond the awaited count: a duplicate or a split trace would show up


def ask_instrumented(conformance: Conformance, app: RagApp) -> list[Answered]:
    """Every plain question, traced by OpenLLMetry into ``conformance``'s sidecar. Its
    uninstrument (0.62.4) leaves its handlers on LlamaIndex's root dispatcher, bound to a
    tracer provider shut down since, under every later test's spans: they are taken off."""
    dispatcher = get_dispatcher()
    span_handlers, event_handlers = list(dispatcher.span_handlers), list(dispatcher.event_handlers)
    instrumentor = LlamaIndexInstrumentor()
    instrumentor.instrument(tracer_provider=conformance.provider)
    try:
        return [app.ask(question, tenant) for question, tenant in PLAIN]
    finally:
        instrumentor.uninstrument()
        dispatcher.span_handlers[:] = span_handlers
        dispatcher.event_handlers[:] = event_handlers


def check_request(trace: RagTrace, answered: Answered) -> None:
    assert trace.query == answered.question
    assert trace.answer == answered.answer
    assert trace.instrumentation == SCOPE
    # The generator got the reranked nodes: their text, their source document (metadata
    # doc_id) with the node id as the chunk, and the tenant of their metadata.
    assert [(c.doc_id, c.chunk_id, c.text, c.tenant, c.id_derived) for c in trace.contexts] == [
        (
            n.node.metadata["doc_id"],
            n.node.node_id,
            n.node.get_content(),
            n.node.metadata["tenant"],
            False,
        )
        for n in answered.source_nodes
    ]
    assert [c.score for c in trace.contexts] == [n.score for n in answered.source_nodes]
    assert list(trace.retrieved) == [n.node.metadata["doc_id"] for n in answered.retrieved]
    assert {"embed", "retrieve", "rerank", "generate", "total"} <= trace.stages.keys()
    for stage in ("retrieve", "rerank", "generate"):
        assert 0 < trace.stages[stage] <= trace.stages["total"], stage
    assert trace.usage == (
        Usage(RERANK_MODEL, None, rerank_units=1),
        Usage(
            LLM_MODEL,
            None,
            prompt_tokens=answered.prompt_tokens,
            completion_tokens=answered.completion_tokens,
        ),
    )


def test_inspect_onboards_what_the_monitor_could_not_read(tmp_path: Path) -> None:
    """Before: every request is counted unreadable under its scope, the loud way. After
    pasting the snippet ``inspect`` prints: each request maps with query, answer, contexts
    with text, retrieved ids, usage and cost, and the embed/retrieve/rerank/generate stages."""
    app = RagApp()
    captured = InMemorySpanExporter()
    with running_sidecar(PRICED) as before:
        before.provider.add_span_processor(SimpleSpanProcessor(captured))
        ask_instrumented(before, app)
        before.flush()
        unreadable = {"field": "request", "present": "false", "instrumentation": "other"}
        wait_until(lambda: before.metric(FIELDS_TOTAL, **unreadable) == N)
        assert before.recorder.traces == []

    printed, snippet = inspect_snippet(otlp_file(captured.get_finished_spans(), tmp_path), N)
    # The scope behind "other", and what to add so the coverage row names it.
    assert f"{SCOPE} (counted as other" in printed
    mapping = snippet["collectors"]["spans"]["mapping"]
    assert {"request_span_names", "json_documents", "json_usage", "span_kind_names"} <= set(mapping)

    with running_sidecar({**PRICED, **snippet}) as after:
        answered = ask_instrumented(after, app)
        after.traces(N)
        time.sleep(SETTLE_S)
        traces = sorted(after.recorder.traces, key=lambda trace: trace.time)
        assert len(traces) == N
        for trace, request in zip(traces, answered, strict=True):
            check_request(trace, request)
        expected = sum(
            float(
                genai_prices.calc_price(
                    genai_prices.Usage(
                        input_tokens=a.prompt_tokens, output_tokens=a.completion_tokens
                    ),
                    model_ref=LLM_MODEL,
                    provider_id="openai",
                ).total_price
            )
            + RERANK_PER_KUNIT / 1000
            for a in answered
        )
        assert after.metric("rag_cost_requests_total", pricing="complete") == N
        assert after.metric("rag_request_cost_usd_sum") == pytest.approx(expected, rel=1e-9)
        assert after.metric(FIELDS_TOTAL, field="request", present="false") == 0
        # The snippet named the scope: the coverage row shows it instead of "other".
        for field in ("contexts", "retrieved_ids", "usage", "stage_retrieve", "stage_rerank"):
            present = {"field": field, "present": "true", "instrumentation": SCOPE}
            assert after.metric(FIELDS_TOTAL, **present) == N, field
