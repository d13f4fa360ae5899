"""Retrieval as a tool call (collectors/spans/tools.py): a tool call whose result is a
list of documents is a retrieval step, in each convention's shape; anything else is no
evidence; several retrievals give the union of their documents; the question stays the
user's; ``mapping.retrieval_tools`` names the tools that retrieve, both ways."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from collectors.spans.config import MappingConfig
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import SpanEvent
from monitor.contract.trace import RagTrace
from tests.unit.collectors.spans.test_openinference import span

QUESTION = "How long do refunds take?"
ANSWER = "Refunds take 30 days [doc-1]."
DOCS = [
    {
        "id": "doc-1",
        "text": "Refunds are accepted within 30 days.",
        "score": 0.91,
        "tenant": "acme",
    },
    {"id": "doc-2", "text": "Shipping takes 5 days.", "score": 0.72, "tenant": "globex"},
]
LISTED = json.dumps(DOCS)


def agent_run(*tool_calls: dict[str, Any], run_kind: str | None = "AGENT") -> list[Any]:
    """An agent run (the request) with a chat call, then each tool call, then a final chat:
    the tool calls' attributes as given, 100 ms each."""
    spans = [
        span("run", None, run_kind, 0, 2000, **{"input.value": QUESTION, "output.value": ANSWER}),
        span("chat1", "run", "LLM", 10, 400, **{
            "llm.token_count.prompt": 40, "llm.token_count.completion": 5,
            "llm.model_name": "gpt-4o-mini",
        }),
    ]  # fmt: skip
    for i, attributes in enumerate(tool_calls):
        start = 500 + 200 * i
        spans.append(span(f"tool{i}", "run", None, start, start + 100, **attributes))
    spans.append(
        span("chat2", "run", "LLM", 1500, 1900, **{
            "llm.token_count.prompt": 90, "llm.token_count.completion": 9,
            "llm.model_name": "gpt-4o-mini",
        })
    )  # fmt: skip
    return spans


def mapped(spans: list[Any], **mapping: Any) -> RagTrace:
    trace = TraceMapper(MappingConfig(**mapping)).build(spans, "otlp")
    assert trace is not None
    return trace


def openinference_tool(output: str, name: str = "search_docs") -> dict[str, Any]:
    return {
        "openinference.span.kind": "TOOL", "tool.name": name,
        "input.value": json.dumps({"query": "refund period"}), "output.value": output,
    }  # fmt: skip


def gen_ai_tool(result: str, name: str = "search_docs") -> dict[str, Any]:
    return {
        "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
        "gen_ai.tool.call.arguments": json.dumps({"query": "refund period"}),
        "gen_ai.tool.call.result": result,
    }  # fmt: skip


# The result of one retrieval tool as each instrumentation writes it.
SHAPES = [
    pytest.param(openinference_tool(LISTED), id="openinference-json-list"),
    pytest.param(
        openinference_tool(json.dumps({"type": "tool", "data": {"content": LISTED}})),
        id="langchain-tool-message",
    ),
    pytest.param(gen_ai_tool(LISTED), id="gen-ai-result"),
    pytest.param(gen_ai_tool(json.dumps([{"text": LISTED}])), id="content-part-wrapping-json"),
    pytest.param(
        {"traceloop.span.kind": "tool", "traceloop.entity.name": "search_docs",
         "traceloop.entity.output": json.dumps({"documents": DOCS})},
        id="openllmetry-entity-output",
    ),
]  # fmt: skip


@pytest.mark.parametrize("tool", SHAPES)
def test_a_tool_that_returns_documents_is_a_retrieval_step(tool: dict[str, Any]) -> None:
    """Its documents are the contexts (ids, texts, scores, tenants, in order), its time is
    the retrieve stage; the query is the user's question, not the tool's argument."""
    trace = mapped(agent_run(tool))
    assert [(c.doc_id, c.text, c.score, c.tenant) for c in trace.contexts] == [
        (d["id"], d["text"], d["score"], d["tenant"]) for d in DOCS
    ]
    assert trace.retrieved == ("doc-1", "doc-2")
    assert trace.stages["retrieve"] == pytest.approx(0.1)
    assert trace.query == QUESTION
    assert trace.answer == ANSWER
    assert [(u.prompt_tokens, u.completion_tokens) for u in trace.usage] == [(40, 5), (90, 9)]


NOT_DOCUMENTS = [
    pytest.param("42", id="a-number"),
    pytest.param(json.dumps({"city": "Paris", "temperature": 21}), id="a-weather-object"),
    pytest.param(json.dumps({"rows": 1200}), id="a-row-count"),
    pytest.param("It is sunny in Paris today.", id="free-text"),
    pytest.param(json.dumps([{"type": "text", "text": "It is sunny."}]), id="a-text-content-part"),
    pytest.param(json.dumps([{"role": "user", "content": "hi"}]), id="chat-messages"),
    pytest.param(json.dumps([{"text": "   "}]), id="blank-texts"),
]


@pytest.mark.parametrize("result", NOT_DOCUMENTS)
def test_a_tool_that_returns_anything_else_is_no_evidence(result: str) -> None:
    """No contexts and no retrieve stage from a result that is no document list."""
    trace = mapped(agent_run(gen_ai_tool(result, name="get_weather")))
    assert trace.contexts == ()
    assert "retrieve" not in trace.stages
    assert trace.retrieval_calls == 0
    assert [(c.name, c.retrieval) for c in trace.tool_calls] == [("get_weather", False)]


def test_several_retrievals_give_the_union_of_their_documents_in_call_order() -> None:
    """Two calls: the second's new documents follow the first's; a document both returned
    is kept once, where it came first; both calls' time is the retrieve stage."""
    second = [
        {"id": "doc-3", "text": "Returns need a receipt.", "tenant": "acme"},
        {"id": "doc-1", "text": "Refunds are accepted within 30 days.", "tenant": "acme"},
    ]
    trace = mapped(agent_run(gen_ai_tool(LISTED), gen_ai_tool(json.dumps(second))))
    assert [c.doc_id for c in trace.contexts] == ["doc-1", "doc-2", "doc-3"]
    assert trace.retrieved == ("doc-1", "doc-2", "doc-3")
    assert trace.stages["retrieve"] == pytest.approx(0.2)
    assert trace.query == QUESTION
    # each step keeps the agent's own query, its arguments
    assert trace.retrieval_calls == 2
    assert [(c.name, c.retrieval, c.arguments, c.documents) for c in trace.tool_calls] == [
        ("search_docs", True, json.dumps({"query": "refund period"}), 2)
    ] * 2


def test_an_agent_run_that_retrieved_nothing_has_no_contexts() -> None:
    """An answer without a tool call: no contexts, no retrieve stage, still a request."""
    trace = mapped(agent_run())
    assert (trace.contexts, "retrieve" in trace.stages) == ((), False)
    assert (trace.retrieval_calls, trace.tool_calls) == (0, ())
    assert (trace.query, trace.answer) == (QUESTION, ANSWER)


def test_retrieval_tools_names_the_tools_that_retrieve_both_ways() -> None:
    """Named, a tool is a retrieval step even when it found nothing a document list holds;
    not named, a tool whose result is a document list is not one."""
    calls = (gen_ai_tool(json.dumps({"hits": 0}), name="kb_search"), gen_ai_tool(LISTED))
    trace = mapped(agent_run(*calls), retrieval_tools=["^kb_"])
    assert trace.contexts == ()
    assert trace.stages["retrieve"] == pytest.approx(0.1)
    by_shape = mapped(agent_run(*calls))
    assert [c.doc_id for c in by_shape.contexts] == ["doc-1", "doc-2"]


def test_a_retrieval_tool_is_read_without_the_run_being_an_agent_span() -> None:
    """A plain root span of no kind that holds the question (an app's own root) works too."""
    trace = mapped(agent_run(gen_ai_tool(LISTED), run_kind=None))
    assert [c.doc_id for c in trace.contexts] == ["doc-1", "doc-2"]


def strands_run(latest: bool) -> list[Any]:
    """A strands-agents run as it traces itself (1.62, no instrumentation package): the
    question and the answer only in the run span's events, the tool's result in its span's
    events (default conventions) or in ``gen_ai.tool.call.result`` wrapped as content parts
    (``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``); the run span reports
    the run's summed usage beside its chat calls'."""
    parts = json.dumps([{"text": LISTED}])
    if latest:
        asked = {
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": QUESTION}]}]
            )
        }
        answered = {
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": ANSWER}]}]
            )
        }
        run_events = (
            ("gen_ai.client.inference.operation.details", asked),
            ("gen_ai.client.inference.operation.details", answered),
        )
        tool = {
            "gen_ai.tool.call.arguments": json.dumps({"query": "refunds"}),
            "gen_ai.tool.call.result": parts,
        }
        tool_events: tuple[tuple[str, dict[str, str]], ...] = ()
    else:
        run_events = (
            ("gen_ai.user.message", {"content": json.dumps([{"text": QUESTION}])}),
            # strands ends the run's answer with a newline of its own
            ("gen_ai.choice", {"message": ANSWER + "\n", "finish_reason": "end_turn"}),
        )
        tool = {}
        tool_events = (
            ("gen_ai.tool.message", {"role": "tool", "content": '{"query": "refunds"}'}),
            ("gen_ai.choice", {"message": parts, "id": "call_1"}),
        )
    usage = {"gen_ai.request.model": "gpt-4o-mini", "gen_ai.system": "strands-agents"}

    def with_events(held: Any, events: tuple[tuple[str, dict[str, str]], ...]) -> Any:
        return dataclasses.replace(
            held, events=tuple(SpanEvent(name, held.start_ns, a) for name, a in events)
        )

    return [
        with_events(span("run", None, None, 0, 2000, **{
            "gen_ai.operation.name": "invoke_agent", **usage,
            "gen_ai.usage.input_tokens": 130, "gen_ai.usage.output_tokens": 14}), run_events),
        span("chat1", "run", None, 10, 400, **{
            "gen_ai.operation.name": "chat", **usage,
            "gen_ai.usage.input_tokens": 40, "gen_ai.usage.output_tokens": 5}),
        with_events(span("tool", "run", None, 500, 600, **{
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_docs",
            **tool}), tool_events),
        span("chat2", "run", None, 700, 1900, **{
            "gen_ai.operation.name": "chat", **usage,
            "gen_ai.usage.input_tokens": 90, "gen_ai.usage.output_tokens": 9}),
    ]  # fmt: skip


@pytest.mark.parametrize("latest", [False, True], ids=["default-events", "latest-conventions"])
def test_a_strands_run_is_read_from_its_events(latest: bool) -> None:
    """Question and answer from the run span's events, the documents from the tool call's
    events or its result attribute, its arguments kept; usage is the chat calls', never
    the run's sum on top."""
    trace = mapped(strands_run(latest))
    assert (trace.query, trace.answer) == (QUESTION, ANSWER)
    assert [c.doc_id for c in trace.contexts] == ["doc-1", "doc-2"]
    assert trace.stages["retrieve"] == pytest.approx(0.1)
    assert [(c.name, c.retrieval, c.arguments) for c in trace.tool_calls] == [
        ("search_docs", True, json.dumps({"query": "refunds"}))
    ]
    assert [(u.prompt_tokens, u.completion_tokens) for u in trace.usage] == [(40, 5), (90, 9)]


def test_a_hostile_result_costs_a_bounded_walk() -> None:
    """Documents two levels down are found, but not behind 4,032 objects that are none:
    the walk looks into 1,024 objects and lists at most, so a maze of a result cannot
    hold the pipeline up."""
    hidden = {"inner": {"documents": DOCS}}
    alone = mapped(agent_run(gen_ai_tool(json.dumps({"found": hidden}))))
    assert [c.doc_id for c in alone.contexts] == ["doc-1", "doc-2"]
    maze = {f"rows_{i}": [{"n": j} for j in range(64)] for i in range(63)}
    trace = mapped(agent_run(gen_ai_tool(json.dumps({**maze, "found": hidden}))))
    assert (trace.contexts, trace.tool_calls[0].retrieval) == ((), False)
