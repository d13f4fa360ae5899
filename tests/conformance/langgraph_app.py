"""A LangGraph agent for the conformance tests: the prebuilt ReAct agent, ChatOpenAI, one tool.

``create_react_agent`` loops between the model (``agent`` node) and a ``ToolNode``
(``tools`` node) running ``search_knowledge_base`` until the model answers in text.
Run as a script (``python -m tests.conformance.langgraph_app OUT.json``) it writes
the spans of three requests (one tool call, two, none) as the official OpenInference
LangChain instrumentation emits them.
"""

from __future__ import annotations

from typing import Any

from langchain_core.tools import tool
from langchain_openai import ChatOpenAI

from tests.conformance.agent_harness import ASKS, MODEL, PLANS, search_knowledge_base

PROMPT = "Answer the user's question. Look facts up with search_knowledge_base."


def build_agent(base_url: str) -> Any:
    """The app's agent, its chat model talking to ``base_url``."""
    from langgraph.prebuilt import create_react_agent

    llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key="sk-test")
    return create_react_agent(llm, [tool(search_knowledge_base)], prompt=PROMPT)


def ask(agent: Any, question: str) -> str:
    """One request as a user would run it: the final message's text."""
    state = agent.invoke({"messages": [("user", question)]})
    return str(state["messages"][-1].content)


def _dump(base_url: str) -> None:
    agent = build_agent(base_url)
    for item in ASKS[:3]:
        ask(agent, item.question)


if __name__ == "__main__":
    from openinference.instrumentation.langchain import LangChainInstrumentor

    from tests.conformance.span_dump import dump_spans

    dump_spans(LangChainInstrumentor(), _dump, plans=PLANS)
