"""An OpenAI Agents SDK agent for the conformance tests: one ``Agent`` with one function tool.

The model is the SDK's default, ``OpenAIResponsesModel`` (``POST /v1/responses``), or
``OpenAIChatCompletionsModel``, on an ``AsyncOpenAI`` client at the fake endpoint;
``Runner.run_sync`` loops between model and tool until the model answers in text. The
SDK traces through its own processors, not OpenTelemetry: an instrumentation registers
one that writes OpenTelemetry spans. The SDK's default processor exports to
api.openai.com, so the app drops it first (``drop_default_trace_processors``). Run as a
script (``python -m tests.conformance.openai_agents_app OUT.json``) it writes the
spans of three requests (one tool call, two, none) on the Responses API as the
OpenInference instrumentation emits them.
"""

from __future__ import annotations

from typing import Literal

from agents import (
    Agent,
    OpenAIChatCompletionsModel,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_trace_processors,
)
from openai import AsyncOpenAI

from tests.conformance.agent_harness import ASKS, MODEL, PLANS, search_knowledge_base

Api = Literal["responses", "chat_completions"]
PROMPT = "Answer the user's question. Look facts up with search_knowledge_base."


def drop_default_trace_processors() -> None:
    """No trace export to api.openai.com: only an instrumentation's processor is left."""
    set_trace_processors([])


def build_agent(base_url: str, api: Api = "responses") -> Agent:
    """The app's agent, its model talking to ``base_url`` over ``api``."""
    client = AsyncOpenAI(base_url=base_url, api_key="sk-test")
    model = (
        OpenAIResponsesModel(model=MODEL, openai_client=client)
        if api == "responses"
        else OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
    )
    return Agent(
        name="support-agent",
        instructions=PROMPT,
        tools=[function_tool(search_knowledge_base)],
        model=model,
    )


def ask(agent: Agent, question: str) -> str:
    """One request as a user would run it: the run's final output."""
    return str(Runner.run_sync(agent, question).final_output)


def _dump(base_url: str) -> None:
    agent = build_agent(base_url)
    for item in ASKS[:3]:
        ask(agent, item.question)


if __name__ == "__main__":
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    from tests.conformance.span_dump import dump_spans

    drop_default_trace_processors()
    dump_spans(OpenAIAgentsInstrumentor(), _dump, plans=PLANS)
