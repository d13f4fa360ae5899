"""strands-agents traced by itself (its native GenAI spans), end to end into the sidecar.

strands-agents[openai] needs openai below 3, rag-monitor's venv has 3, so the agent runs
in a venv of its own (built once a session from ``strands-requirements.txt``, as
test_genai_evaluations.py builds its producer's) as a client process, ``strands_app.py``: it exports OTLP/HTTP to the sidecar and talks
to the fake OpenAI server, one request per question sent on its stdin. Its tool returns
the harness's documents for each query and the app reports the queries it was called with.

The root is ``invoke_agent rag-agent`` (the run's summed usage; question and answer as
events); each ``execute_event_loop_cycle`` holds a ``chat`` span and the cycle's
``execute_tool search_knowledge_base``, whose result is a ``gen_ai.choice`` event (the
default conventions) or a ``gen_ai.client.inference.operation.details`` event's
``gen_ai.output.messages`` (``OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental``).
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

import pytest

from tests.conformance import agent_harness as harness
from tests.conformance.agent_harness import Run
from tests.conformance.conftest import Conformance, pinned_venv
from tests.conformance.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

REQUIREMENTS = Path(__file__).with_name("strands-requirements.txt")
APP = Path(__file__).with_name("strands_app.py")
OPT_IN = "OTEL_SEMCONV_STABILITY_OPT_IN"
# The app's conventions: strands' default, and the latest GenAI conventions.
CONVENTIONS = {"default": None, "latest": "gen_ai_latest_experimental"}
# Importing strands and its model takes a few seconds; one agent run well under one.
REPLY_S = 60.0


def _line(app: subprocess.Popen[str], stderr: IO[str]) -> str:
    """The app's next line of output; fails with its stderr when none comes."""
    assert app.stdout is not None
    ready, _, _ = select.select([app.stdout], [], [], REPLY_S)
    line = app.stdout.readline() if ready else ""
    if not line:
        stderr.seek(0)
        pytest.fail(f"strands_app.py gave no answer (exit {app.poll()}):\n{stderr.read()[-3000:]}")
    return line


@contextmanager
def served(
    conformance: Conformance,
    fake_openai: FakeOpenAI,
    opt_in: str | None,
    python: Path,
    exported: Path | None = None,
) -> Iterator[Run]:
    """Serve the agent requests through strands' Agent in its own venv (``python``), collect
    the RagTraces; the app writes its spans to the OTLP file ``exported`` too, when given."""
    assert conformance.sidecar.http is not None
    traces_url = f"http://127.0.0.1:{conformance.sidecar.http.port}/v1/traces"
    results = {query: harness.search_knowledge_base(query)
               for ask in harness.ASKS for query in ask.queries}  # fmt: skip
    env = {name: value for name, value in os.environ.items() if name != OPT_IN}
    if opt_in is not None:
        env[OPT_IN] = opt_in
    with tempfile.NamedTemporaryFile("w+") as stderr:
        app = subprocess.Popen(
            [str(python), str(APP), traces_url, fake_openai.base_url, json.dumps(results),
             *([str(exported)] if exported is not None else [])],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
        )  # fmt: skip
        assert app.stdin is not None
        try:
            assert _line(app, stderr).strip() == "ready"

            def ask(question: str) -> str:
                assert app.stdin is not None
                app.stdin.write(json.dumps(question) + "\n")
                app.stdin.flush()
                reply = json.loads(_line(app, stderr))
                # The tool ran in the app: its calls go to the harness's log from there.
                with harness.ToolLog.lock:
                    harness.ToolLog.queries.extend(reply["queries"])
                return str(reply["answer"])

            # strands writes its own name where the conventions put the provider's
            # (gen_ai.system, gen_ai.provider.name): that is what its usage carries.
            yield harness.run_agent(conformance, fake_openai, ask, provider="strands-agents")
        finally:
            app.stdin.close()
            try:
                app.wait(timeout=30)
            finally:
                app.kill()


@pytest.fixture(scope="session")
def strands_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv holding the pinned strands-agents (built once a session)."""
    return pinned_venv(tmp_path_factory.mktemp("strands") / "venv", ["-r", str(REQUIREMENTS)])


@pytest.fixture(params=CONVENTIONS.values(), ids=CONVENTIONS.keys())
def run(
    request: pytest.FixtureRequest,
    conformance: Conformance,
    fake_openai: FakeOpenAI,
    strands_python: Path,
) -> Iterator[Run]:
    with served(conformance, fake_openai, request.param, strands_python) as result:
        yield result


@pytest.mark.parametrize("check", harness.CHECKS, ids=lambda check: check.__name__)
def test_every_request(run: Run, check: Callable[[Run], None]) -> None:
    """The harness's check (its docstring says which field and what) holds for every request."""
    check(run)


@pytest.mark.parametrize("opt_in", CONVENTIONS.values(), ids=CONVENTIONS.keys())
def test_inspect_onboarding_proposes_nothing_wrong(
    fake_openai: FakeOpenAI, strands_python: Path, tmp_path: Path, opt_in: str | None
) -> None:
    """Inspect reads every run as a request and proposes no documents; its snippet pasted, every check passes again."""
    exported = tmp_path / "strands.otlp"
    harness.check_inspect_onboarding(
        lambda conformance: served(conformance, fake_openai, opt_in, strands_python, exported),
        tmp_path,
        exported,
    )
