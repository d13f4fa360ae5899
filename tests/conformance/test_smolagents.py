"""smolagents' ToolCallingAgent with openinference-instrumentation-smolagents, end to end into
the sidecar.

The root is the AGENT span ``ToolCallingAgent.run`` (``input.value`` holds ``task``, the
question; ``output.value`` the final answer) carrying the run's summed token counts;
each step is a CHAIN span around one LLM span and one TOOL span. The retrieval tool's
JSON list is the TOOL span's ``output.value`` (text/plain); the answer is also the
``final_answer`` TOOL span's output, the model having answered by a tool call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from openinference.instrumentation.smolagents import SmolagentsInstrumentor

from tests.conformance import agent_harness as harness
from tests.conformance.agent_harness import Run
from tests.conformance.conftest import Conformance, instrumented
from tests.conformance.fake_openai import FakeOpenAI
from tests.conformance.smolagents_app import ask, build_agent

pytestmark = pytest.mark.integration


@contextmanager
def served(conformance: Conformance, fake_openai: FakeOpenAI) -> Iterator[Run]:
    """Serve the agent requests through the instrumented ToolCallingAgent, collect the RagTraces."""
    uninstrument = instrumented(SmolagentsInstrumentor(), conformance.provider)
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
