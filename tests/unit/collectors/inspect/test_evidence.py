"""``rag-monitor inspect`` proposes only evidence as documents: never instructions,
prompts, messages, tool arguments or inputs; never a list that is the same in every trace
inspected; and a result-named attribute before the others."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from collectors.inspect.command import print_reports
from collectors.inspect.view import render
from collectors.spans.config import MappingConfig
from collectors.spans.span import Span
from tests.unit.collectors.inspect.test_command import ANSWER, QUERY, report_of, span

INSTRUCTIONS = [{"type": "text", "content": "You are a support agent. Cite the documents."}]


def agent_trace(**tool: Any) -> list[Span]:
    """A GenAI agent run: system instructions on the run, a chat call, and a tool call
    with ``tool``'s attributes (gen_ai.tool.*)."""
    return [
        span("run", None, None, 1000, 2000, **{
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.system_instructions": json.dumps(INSTRUCTIONS),
            "input.value": QUERY, "output.value": ANSWER,
        }),
        span("tool", "run", None, 1010, 1090, **{
            "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather", **tool,
        }),
        span("chat", "run", None, 1100, 1900, **{
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": QUERY}]),
        }),
    ]  # fmt: skip


def test_system_instructions_are_never_proposed_as_documents_and_the_reason_says_so() -> None:
    """The only JSON list of objects in the trace is the agent's system instructions (the
    tool returned a weather object, and its arguments are a list too): no document setting
    is proposed, and the contexts' reason names the instructions as never evidence."""
    arguments = json.dumps([{"text": "Paris"}, {"text": "tomorrow"}])
    spans = agent_trace(**{
        "gen_ai.tool.call.arguments": arguments,
        "gen_ai.tool.call.result": json.dumps({"temperature": 21, "sky": "clear"}),
    })  # fmt: skip
    report = report_of(spans)
    assert "contexts" in report["missing"]
    assert not {"document_attributes", "json_documents"} & report["mapping"].keys()
    reason = report["missing"]["contexts"]
    assert 'gen_ai.system_instructions on "run"' in reason
    assert 'gen_ai.tool.call.arguments on "tool"' in reason
    assert "never evidence" in reason
    assert "gen_ai.system_instructions" in render(report)


def traces_with(*documents: list[dict[str, str]]) -> list[list[Span]]:
    """One pipeline trace per list, each under ``acme.context`` on its step span."""
    return [
        [
            span(f"root{i}", None, None, 1000, 2000, **{"input.value": QUERY}),
            span(f"step{i}", f"root{i}", None, 1010, 1090, **{"acme.context": json.dumps(docs)}),
            span(f"chat{i}", f"root{i}", None, 1100, 1900, **{"gen_ai.operation.name": "chat"}),
        ]
        for i, docs in enumerate(documents)
    ]


def printed(traces: list[list[Span]], capsys: pytest.CaptureFixture[str]) -> str:
    print_reports(traces, MappingConfig(), [], False)
    return capsys.readouterr().out


def test_a_list_that_is_the_same_in_every_trace_is_refused_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Two traces whose only document-shaped list is the same template: mapping again
    would fill their contexts, but with the same text for every question, so the setting
    is not proposed, and both the trace's report and the summary say why."""
    template = [{"text": "Answer politely."}, {"text": "Never promise refunds."}]
    out = printed(traces_with(template, template), capsys)
    reason = (
        "document_attributes acme.context not proposed: it gives the same 2 document(s) in "
        "all 2 traces it fills (a prompt or a template, not what a retrieval returned)"
    )
    assert out.count(reason) == 3  # each trace's report, and the summary
    # the same list read as a json_documents section is refused the same way
    assert out.count("json_documents {") == 3
    snippet = yaml.safe_load(out[out.rindex("suggested mapping") :].split("\n", 1)[1])
    assert "collectors" not in snippet  # nothing of the mapping is left to propose


def test_a_list_that_differs_per_trace_is_proposed(capsys: pytest.CaptureFixture[str]) -> None:
    """The same attribute holding each request's own documents is proposed."""
    out = printed(
        traces_with([{"id": "a", "text": "Returns: 30 days."}], [{"id": "b", "text": "Free."}]),
        capsys,
    )
    assert "not proposed" not in out
    assert "document_attributes: [acme.context]" in out


def test_a_result_named_attribute_is_proposed_before_the_others() -> None:
    """Two document-shaped lists on the step: the tool's result is proposed, the notes are
    not (the contexts are filled by then)."""
    spans = [
        span("root", None, None, 1000, 2000, **{"input.value": QUERY}),
        span("step", "root", None, 1010, 1090, **{
            "acme.notes": json.dumps([{"text": "Remember the tone guide."}]),
            "acme.search.result": json.dumps([{"id": "d1", "text": "Returns: 30 days."}]),
        }),
        span("chat", "root", None, 1100, 1900, **{"gen_ai.operation.name": "chat"}),
    ]  # fmt: skip
    assert report_of(spans)["mapping"]["document_attributes"] == ["acme.search.result"]


def test_the_contexts_reason_names_the_tool_calls_looked_at() -> None:
    """A tool call whose result is no document list is named in the missing reason."""
    spans = agent_trace(**{"gen_ai.tool.call.result": json.dumps({"temperature": 21})})
    reason = report_of(spans)["missing"]["contexts"]
    assert 'tool calls "tool" (tool get_weather) gave no documents' in reason
    assert "no list of documents in their results" in reason


def test_a_tools_documents_are_named_from_the_tool_call_not_a_message_quoting_them() -> None:
    """The documents sit in a LangChain ToolMessage (JSON text inside the JSON output) and
    are quoted again in the next chat call's messages: inspect names the tool span, the
    pointer through the message's content, and the tool call's times for retrieve."""
    listed = json.dumps([{"id": "kb-1", "text": "Refunds take thirty days.", "tenant": "acme"}])
    spans = [
        span("run", None, "AGENT", 1000, 2000, **{"input.value": QUERY, "output.value": ANSWER}),
        span("search", "run", "TOOL", 1010, 1090, **{
            "tool.name": "search_kb",
            "output.value": json.dumps({"type": "tool", "data": {"content": listed}}),
        }),
        span("chat", "run", "LLM", 1100, 1900, **{
            "llm.input_messages.0.message.role": "tool",
            "llm.input_messages.0.message.content": listed,
        }),
    ]  # fmt: skip
    fields = report_of(spans)["fields"]
    text = fields["contexts"][0]["text"]["from"][0]
    assert (text["span"], text["name"], text["pointer"]) == (
        "search", "output.value", "/data/content/0/text"
    )  # fmt: skip
    assert fields["contexts"][0]["doc_id"]["from"][0]["span"] == "search"
    assert [origin["span"] for origin in fields["stages"]["retrieve"]["from"]] == ["search"]
