"""LangGraph's prebuilt ReAct agent with openinference-instrumentation-langchain, end to end
into the sidecar.

The agent retrieves by calling a tool: its documents exist only in the TOOL span's
``output.value`` (a serialized LangChain ``ToolMessage`` whose ``content`` is the tool's
JSON list) and, again, in the next LLM span's input messages. The root is the graph's
CHAIN span (``LangGraph``), its ``input.value`` the graph input ``{"messages": [["user",
question]]}``; each model turn is an ``agent`` AGENT span around an LLM span.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from openinference.instrumentation.langchain import LangChainInstrumentor

from tests.conformance import agent_harness as harness
from tests.conformance.agent_harness import Run
from tests.conformance.conftest import Conformance, instrumented
from tests.conformance.fake_openai import FakeOpenAI
from tests.conformance.langgraph_app import ask, build_agent

pytestmark = pytest.mark.integration


@contextmanager
def served(conformance: Conformance, fake_openai: FakeOpenAI) -> Iterator[Run]:
    """Serve the agent requests through the instrumented ReAct agent, collect the RagTraces."""
    uninstrument = instrumented(LangChainInstrumentor(), conformance.provider)
    try:
        agent = build_agent(fake_openai.base_url)
        yield harness.run_agent(conformance, fake_openai, lambda question: ask(agent, question))
    finally:
        uninstrument()


@pytest.fixture
def run(conformance: Conformance, fake_openai: FakeOpenAI) -> Iterator[Run]:
    with served(conformance, fake_openai) as result:
        yield result


@pytest.mark.parametrize("check", harness.CHECKS, ids=lambda check: check.__name__)
def test_every_request(run: Run, check: Callable[[Run], None]) -> None:
    """The harness's check (its docstring says which field and what) holds for every request."""
    check(run)


def test_inspect_onboarding_proposes_nothing_wrong(fake_openai: FakeOpenAI, tmp_path: Path) -> None:
    """Inspect reads every run as a request and proposes no documents; its snippet pasted, every check passes again."""
    harness.check_inspect_onboarding(lambda conformance: served(conformance, fake_openai), tmp_path)
