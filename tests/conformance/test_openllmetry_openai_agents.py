"""The OpenAI Agents SDK with OpenLLMetry (Traceloop's opentelemetry-instrumentation-openai-agents),
end to end into the sidecar, on the Responses API.

Its processor writes a ``workflow`` root span (``Agent Workflow``, no input or output),
an ``invoke_agent`` span, a GenAI ``chat`` span per model call (``openai.response``:
``gen_ai.input.messages`` / ``gen_ai.output.messages``, ``gen_ai.usage.*``,
``gen_ai.response.model``) and an ``execute_tool`` span per tool call, the tool's JSON
list in ``gen_ai.tool.call.result``. On the Chat Completions model (not tested here)
0.62.4 writes the chat spans without output messages, response model or usage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

from tests.conformance import agent_harness as harness
from tests.conformance.agent_harness import Run
from tests.conformance.conftest import Conformance, instrumented
from tests.conformance.fake_openai import FakeOpenAI
from tests.conformance.openai_agents_app import ask, build_agent, drop_default_trace_processors

pytestmark = pytest.mark.integration


class _Traceloop:
    """The instrumentation as ``Traceloop.init()`` installs it, its processor the SDK's only one."""

    def __init__(self) -> None:
        self.part = OpenAIAgentsInstrumentor(replace_existing_processors=True)

    def instrument(self, **kwargs: Any) -> None:
        self.part.instrument(**kwargs)

    def uninstrument(self) -> None:
        self.part.uninstrument()
        # 0.62.4's uninstrument() leaves its processor registered: the next test's runs
        # would still reach it, bound to a tracer provider shut down since.
        drop_default_trace_processors()


@contextmanager
def served(conformance: Conformance, fake_openai: FakeOpenAI) -> Iterator[Run]:
    """Serve the agent requests through the instrumented SDK, collect the RagTraces."""
    drop_default_trace_processors()
    uninstrument = instrumented(_Traceloop(), conformance.provider)
    try:
        agent = build_agent(fake_openai.base_url, "responses")
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
