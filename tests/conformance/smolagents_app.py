"""A smolagents agent for the conformance tests: a ``ToolCallingAgent`` on ``OpenAIServerModel``.

Each step is one chat completion: the model calls ``search_knowledge_base`` or, to
answer, smolagents' ``final_answer`` tool (so no model turn has text content; the
answer is that tool's argument, which ``agent.run`` returns). smolagents sends the
question as ``"New task:\\n<question>"`` and a tool's result back as a user message
``"Observation:\\n<result>"``. Run as a script
(``python -m tests.conformance.smolagents_app OUT.json``) it writes the spans of
three requests (one tool call, two, none) as the official OpenInference smolagents
instrumentation emits them.
"""

from __future__ import annotations

from smolagents import OpenAIServerModel, ToolCallingAgent, tool
from smolagents.monitoring import LogLevel

from tests.conformance.agent_harness import ASKS, MODEL, PLANS, search_knowledge_base

# Two tool calls and the final answer are three steps.
MAX_STEPS = 5


def build_agent(base_url: str) -> ToolCallingAgent:
    """The app's agent, its model talking to ``base_url``."""
    model = OpenAIServerModel(model_id=MODEL, api_base=base_url, api_key="sk-test")
    return ToolCallingAgent(
        tools=[tool(search_knowledge_base)],
        model=model,
        max_steps=MAX_STEPS,
        verbosity_level=LogLevel.OFF,
    )


def ask(agent: ToolCallingAgent, question: str) -> str:
    """One request as a user would run it: the agent's final answer."""
    return str(agent.run(question))


def _dump(base_url: str) -> None:
    agent = build_agent(base_url)
    for item in ASKS[:3]:
        ask(agent, item.question)


if __name__ == "__main__":
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor

    from tests.conformance.span_dump import dump_spans

    dump_spans(SmolagentsInstrumentor(), _dump, plans=PLANS)
