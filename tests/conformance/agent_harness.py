"""What the agent conformance tests share: one retrieval tool, the requests, and the checks.

An agent framework's app (``langgraph_app.py``, ...) gives its agent one tool,
``search_knowledge_base``, whose result is a JSON list of documents (``id``,
``text``, ``score``, ``tenant``), deterministic per query. The fake model's
``plans`` make the agent call it once, twice (two queries whose results share a
document) or not at all before it answers. The checks say what the sidecar must
record for each run: the user's question as the query (never a tool argument),
the final answer, the documents of every call in call order and deduplicated by
id (the first occurrence kept), a ``retrieve`` stage only where the tool ran, and
one usage per chat call (never also an agent span's aggregate). ``check_inspect_onboarding``
runs ``rag-monitor inspect`` on an app's spans and every check again with what it suggests.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import genai_prices
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from detectors.faithfulness.triage import premise_of
from monitor.contract.trace import RagTrace, Usage
from tests.conformance.conftest import Conformance, running_sidecar
from tests.conformance.fake_openai import FakeOpenAI, Reply, answer_for
from tests.conformance.onboarding import inspect_snippet, otlp_file, suggested_mappings

MODEL = "gpt-4o-mini"
TOOL_NAME = "search_knowledge_base"
TOP_K = 2
# Longer than assembly grace (0.3 s) plus the batch delay (0.1 s): a split trace would show up.
SETTLE_S = 1.0
# Between two requests, so that a trace's start time tells which request it is.
GAP_S = 0.02


@dataclass(frozen=True)
class Doc:
    """One document of the knowledge base, owned by one tenant."""

    doc_id: str
    tenant: str
    text: str


CORPUS: tuple[Doc, ...] = (
    Doc("kb-refunds", "acme", "Refunds are accepted within thirty days of purchase."),
    Doc("kb-refund-method", "acme", "Refunds are paid back to the original payment method."),
    Doc("kb-shipping-eu", "globex", "Shipping to Europe takes five business days."),
    Doc("kb-delivery", "globex", "Every delivery to Europe is tracked and insured."),
    Doc(
        "kb-warranty",
        "initech",
        "The warranty covers hardware defects for two years after delivery.",
    ),
    Doc("kb-invoices", "initech", "Invoices are issued on the first business day of every month."),
    Doc("kb-encryption", "umbrella", "Data is encrypted at rest with AES-256."),
    Doc("kb-keys", "umbrella", "Encryption keys are rotated every ninety days."),
)


def _words(text: str) -> set[str]:
    return {word.strip("?.,!").lower() for word in text.split()}


def search(query: str) -> list[dict[str, Any]]:
    """The top documents by word overlap with ``query`` (ties in corpus order); the score is
    the share of the query's words found."""
    words = _words(query)
    scored = [(len(words & _words(doc.text)), doc) for doc in CORPUS]
    ranked = sorted((item for item in scored if item[0] > 0), key=lambda item: -item[0])
    return [
        {
            "id": doc.doc_id,
            "text": doc.text,
            "score": round(hits / len(words), 4),
            "tenant": doc.tenant,
        }
        for hits, doc in ranked[:TOP_K]
    ]


class ToolLog:
    """The queries the retrieval tool was called with, in order."""

    queries: list[str] = []  # noqa: RUF012 (one log, reset per run)
    lock = threading.Lock()


def search_knowledge_base(query: str) -> str:
    """Search the company knowledge base. Returns the matching documents as a JSON list.

    Args:
        query: what to search for
    """
    with ToolLog.lock:
        ToolLog.queries.append(query)
    return json.dumps(search(query))


@dataclass(frozen=True)
class Ask:
    """One request: the user's question, the tool calls the model plans for it, and the
    documents the sidecar must record (those calls' documents, deduplicated by id)."""

    question: str
    queries: tuple[str, ...]
    doc_ids: tuple[str, ...]


ASKS: tuple[Ask, ...] = (
    Ask(
        "How many days do customers have to ask for a refund?",
        ("refunds accepted days",),
        ("kb-refunds", "kb-refund-method"),
    ),
    # Two calls; kb-delivery is in both results, kept where the first call put it.
    Ask(
        "How long does shipping to Europe take, and what does the warranty cover?",
        ("shipping Europe delivery", "warranty delivery"),
        ("kb-shipping-eu", "kb-delivery", "kb-warranty"),
    ),
    # Answered without the tool: no contexts, no retrieve stage.
    Ask("Hello! What can you help me with?", (), ()),
    Ask("When are invoices issued?", ("invoices issued",), ("kb-invoices",)),
    Ask("Is customer data encrypted at rest?", ("encrypted rest",), ("kb-encryption",)),
)
N = len(ASKS)
PLANS: dict[str, tuple[str, ...]] = {ask.question: ask.queries for ask in ASKS}


def expected_documents(ask: Ask) -> list[dict[str, Any]]:
    """The documents of the planned tool calls in call order, the first of each id kept."""
    seen: dict[str, dict[str, Any]] = {}
    for query in ask.queries:
        for doc in search(query):
            seen.setdefault(doc["id"], doc)
    return list(seen.values())


@dataclass(frozen=True)
class Request:
    """One agent run as the app saw it, next to what the sidecar made of it."""

    ask: Ask
    answer: str
    replies: tuple[Reply, ...]  # the model's turns, in order
    tool_queries: tuple[str, ...]  # what the tool was called with, in order
    trace: RagTrace | None


@dataclass(frozen=True)
class Run:
    requests: tuple[Request, ...]
    traces: tuple[RagTrace, ...]
    conformance: Conformance
    # What the spans name as the model's provider (gen_ai.system, llm.provider, ...).
    provider: str = "openai"


def run_agent(
    conformance: Conformance,
    fake_openai: FakeOpenAI,
    ask: Callable[[str], str],
    provider: str = "openai",
) -> Run:
    """Serve ``ASKS`` one after another through ``ask`` (the instrumented agent), then pair
    each request with the RagTrace that started while it ran."""
    fake_openai.plans = PLANS
    with ToolLog.lock:
        ToolLog.queries.clear()
    sent = []
    for item in ASKS:
        first_reply, first_query = len(fake_openai.replies), len(ToolLog.queries)
        started = time.time_ns()
        answer = ask(item.question)
        ended = time.time_ns()
        sent.append((item, answer, tuple(fake_openai.replies[first_reply:]),
                     tuple(ToolLog.queries[first_query:]), started, ended))  # fmt: skip
        time.sleep(GAP_S)
    conformance.flush()
    # Fewer traces than requests fail in the checks, which say which request has none.
    with contextlib.suppress(AssertionError):
        conformance.traces(N, timeout=20.0)
    time.sleep(SETTLE_S)
    conformance.flush()
    traces = tuple(sorted(conformance.recorder.traces, key=lambda trace: trace.time))
    requests = []
    for item, answer, replies, queries, started, ended in sent:
        during = [trace for trace in traces if started // 1000 <= _micros(trace) <= ended // 1000]
        requests.append(Request(item, answer, replies, queries, during[0] if during else None))
        # The app did what the plan says, so the checks below test the sidecar alone.
        assert queries == item.queries, (item.question, queries)
        assert answer == answer_for(item.question)
        assert [reply.kind for reply in replies] == ["chat"] * len(replies)
    return Run(tuple(requests), traces, conformance, provider)


def _micros(trace: RagTrace) -> int:
    return round(trace.time.timestamp() * 1_000_000)


def trace_of(request: Request) -> RagTrace:
    assert request.trace is not None, f"no RagTrace for {request.ask.question!r}"
    return request.trace


def check_one_trace_per_request(run: Run) -> None:
    """Each agent run, with or without tool calls, is exactly one RagTrace, counted once."""
    assert [request.trace is not None for request in run.requests] == [True] * N, [
        (trace.query, trace.time) for trace in run.traces
    ]
    assert len(run.traces) == N, [(trace.query, trace.time) for trace in run.traces]
    assert len({trace_of(request).trace_id for request in run.requests}) == N
    assert run.conformance.metric("rag_requests_total", source="otlp") == N
    assert all(trace.source == "otlp" for trace in run.traces)


def check_query_and_answer(run: Run) -> None:
    """The query is the user's question (never a tool's argument); the answer the final one."""
    for request in run.requests:
        trace = trace_of(request)
        assert (trace.query, trace.answer) == (request.ask.question, request.answer)


def check_contexts(run: Run) -> None:
    """Contexts and retrieved ids are the tool calls' documents in call order, once per id,
    and so is the faithfulness judge's premise; none without a call."""
    for request in run.requests:
        trace = trace_of(request)
        documents = expected_documents(request.ask)
        assert tuple(doc["id"] for doc in documents) == request.ask.doc_ids  # the table is right
        assert [(context.doc_id, context.text) for context in trace.contexts] == [
            (doc["id"], doc["text"]) for doc in documents
        ], request.ask.question
        assert trace.retrieved == request.ask.doc_ids, request.ask.question
        # what the faithfulness judge scores the answer against (empty: no_context)
        assert premise_of(trace) == "\n\n".join(doc["text"] for doc in documents)


def check_stages(run: Run) -> None:
    """Retrieve (only where the tool ran), generate and total are timed within the request."""
    for request in run.requests:
        trace = trace_of(request)
        assert {"generate", "total"} <= trace.stages.keys(), (request.ask.question, trace.stages)
        assert 0 < trace.stages["generate"] <= trace.stages["total"]
        if request.ask.queries:
            assert "retrieve" in trace.stages, (request.ask.question, trace.stages)
            assert 0 < trace.stages["retrieve"] <= trace.stages["total"]
        else:
            assert "retrieve" not in trace.stages, (request.ask.question, trace.stages)


def check_usage_and_cost(run: Run) -> None:
    """One usage per model call as the model reported it (never an agent span's aggregate
    too); the cost is their sum, priced by genai-prices."""
    expected_cost = 0.0
    for request in run.requests:
        trace = trace_of(request)
        assert trace.usage == tuple(
            Usage(
                model=MODEL,
                provider=run.provider,
                prompt_tokens=reply.prompt_tokens,
                completion_tokens=reply.completion_tokens,
            )
            for reply in request.replies
        ), request.ask.question
        for reply in request.replies:
            expected_cost += float(
                genai_prices.calc_price(
                    genai_prices.Usage(
                        input_tokens=reply.prompt_tokens, output_tokens=reply.completion_tokens
                    ),
                    model_ref=MODEL,
                    provider_id="openai",
                ).total_price
            )
    assert run.conformance.metric("rag_request_cost_usd_count") == N
    assert run.conformance.metric("rag_request_cost_usd_sum") == pytest.approx(
        expected_cost, rel=1e-6
    )


def check_context_scores_and_tenants(run: Run) -> None:
    """A document two calls returned keeps the score of the first; every context keeps its
    tenant."""
    for request in run.requests:
        trace = trace_of(request)
        assert [(context.doc_id, context.score, context.tenant) for context in trace.contexts] == [
            (doc["id"], doc["score"], doc["tenant"]) for doc in expected_documents(request.ask)
        ], request.ask.question


# Every field check of a run; a module runs each as one test (named after it).
CHECKS: tuple[Callable[[Run], None], ...] = (
    check_one_trace_per_request,
    check_query_and_answer,
    check_contexts,
    check_context_scores_and_tenants,
    check_stages,
    check_usage_and_cost,
)
# What inspect must not propose here: the tool results are read as documents by default.
DOCUMENT_SETTINGS = {"document_attributes", "json_documents"}


def check_inspect_onboarding(
    serve: Callable[[Conformance], AbstractContextManager[Run]],
    tmp_path: Path,
    exported: Path | None = None,
) -> None:
    """Onboarding as an operator does it: the spans of ``ASKS`` served (``serve``: the
    instrumented app on a sidecar's provider; an app in a process of its own writes them
    to the OTLP file ``exported`` too) go through ``rag-monitor inspect``, which must read
    every trace as a request and propose no document setting for any (nor refuse one);
    its summary's snippet, pasted into a fresh sidecar's config, passes every check again."""
    captured = InMemorySpanExporter()
    with running_sidecar({}) as before:
        before.provider.add_span_processor(SimpleSpanProcessor(captured))
        with serve(before):
            pass
    path = exported or otlp_file(captured.get_finished_spans(), tmp_path)
    printed, snippet = inspect_snippet(path, N)
    summary = printed[printed.rindex(f"\n{N} trace(s)") :]
    assert f"{N} trace(s): {N} RAG request(s), 0 not" in summary, summary
    for suggested in suggested_mappings(printed):
        mapping = suggested.get("collectors", {}).get("spans", {}).get("mapping", {})
        assert not DOCUMENT_SETTINGS & mapping.keys(), printed
    assert "not proposed" not in printed, printed
    # At most the scopes field coverage counts as "other", named.
    assert set(snippet) <= {"service"}, summary
    assert set(snippet.get("service", {})) <= {"instrumentations"}, summary
    with running_sidecar(snippet) as after, serve(after) as run:
        for check in CHECKS:
            check(run)
