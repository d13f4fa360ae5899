"""The OpenAI Agents SDK with openinference-instrumentation-openai-agents, end to end into the
sidecar, on the Responses API (the SDK's default model) and on Chat Completions.

The instrumentation is a processor of the SDK's own traces: the root is an AGENT span
``Agent workflow`` with no input or output, over a CHAIN span of that name; below them
the agent's AGENT span, one CHAIN ``turn`` span per model turn, an LLM span per call (``llm.input_messages`` /
``llm.output_messages``, token counts) and a TOOL span per tool call, the tool's JSON
list in its ``output.value``. The question exists only in the LLM spans' input messages,
the answer only in the last one's output.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

from tests.conformance import agent_harness as harness
from tests.conformance.agent_harness import Run
from tests.conformance.conftest import Conformance, instrumented
from tests.conformance.fake_openai import FakeOpenAI
from tests.conformance.openai_agents_app import (
    Api,
    ask,
    build_agent,
    drop_default_trace_processors,
)

pytestmark = pytest.mark.integration


APIS: tuple[Api, ...] = ("responses", "chat_completions")


@contextmanager
def served(conformance: Conformance, fake_openai: FakeOpenAI, api: Api) -> Iterator[Run]:
    """Serve the agent requests through the instrumented SDK, collect the RagTraces."""
    drop_default_trace_processors()
    uninstrument = instrumented(OpenAIAgentsInstrumentor(), conformance.provider)
    try:
        agent = build_agent(fake_openai.base_url, api)
        yield harness.run_agent(conformance, fake_openai, lambda question: ask(agent, question))
    finally:
        uninstrument()


@pytest.fixture(params=APIS)
def run(
    request: pytest.FixtureRequest, conformance: Conformance, fake_openai: FakeOpenAI
) -> Iterator[Run]:
    with served(conformance, fake_openai, request.param) as result:
        yield result


@pytest.mark.parametrize("check", harness.CHECKS, ids=lambda check: check.__name__)
def test_every_request(run: Run, check: Callable[[Run], None]) -> None:
    """The harness's check (its docstring says which field and what) holds for every request."""
    check(run)


@pytest.mark.parametrize("api", APIS)
def test_inspect_onboarding_proposes_nothing_wrong(
    api: Api, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """Inspect reads every run as a request and proposes no documents; its snippet pasted, every check passes again."""
    harness.check_inspect_onboarding(
        lambda conformance: served(conformance, fake_openai, api), tmp_path
    )
