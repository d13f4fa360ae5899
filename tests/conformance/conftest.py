"""Conformance harness: a running sidecar fed by real instrumentations over OTLP/HTTP.

Each test builds a real pipeline of a framework (fake models, no network but
loopback), instruments it with the framework's official instrumentation, and
exports through the real OTLP/HTTP exporter into an in-process sidecar. The
sidecar's ``RagTrace`` values are recorded by an extra inline detector, so a
test can assert field by field what the sidecar made of each request.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from monitor.contract.detector import InlineDetector
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace
from monitor.runtime.sidecar import Sidecar
from tests.conformance.fake_openai import FakeOpenAI
from tests.conftest import make_config, merge_sections, sample, wait_until

# The agent tests' shared checks and the inspect step: failures show the values compared,
# as in a test module.
pytest.register_assert_rewrite("tests.conformance.agent_harness", "tests.conformance.onboarding")

# Frameworks phone home (telemetry, tokenizer downloads) unless told not to.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")
os.environ.setdefault("OPENAI_API_KEY", "sk-conformance-test")


# What pip says when the index cannot be reached (then a test needing a venv of its own
# skips; any other failure, a pin the index lacks included, fails): connection errors, or
# no version at all of a package PyPI holds.
UNREACHABLE = ("NewConnectionError", "Failed to establish", "Name or service not known",
               "Temporary failure in name resolution", "Network is unreachable",
               "ConnectTimeout", "(from versions: none)")  # fmt: skip


def pinned_venv(venv: Path, requirements: Sequence[str]) -> Path:
    """The python of a new venv at ``venv`` holding ``requirements`` (pip arguments: exact
    pins, or ``-r FILE``), for a client whose pins conflict with the project's."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", *requirements],
                             check=False, capture_output=True, text=True, timeout=600)  # fmt: skip
    if install.returncode != 0:
        if any(sign in install.stderr for sign in UNREACHABLE):
            pytest.skip("pip cannot reach the package index")
        pytest.fail(f"pip install failed:\n{install.stderr[-2000:]}")
    return python


class RecordingDetector(InlineDetector):
    """Keeps every ``RagTrace`` the pipeline hands to the detectors."""

    name: ClassVar[str] = "recording"

    def __init__(self) -> None:
        self.traces: list[RagTrace] = []
        self._lock = threading.Lock()

    def observe(self, trace: RagTrace) -> None:
        with self._lock:
            self.traces.append(trace)


@dataclass
class Conformance:
    """A running sidecar, the tracer provider exporting to it, and what it recorded."""

    sidecar: Sidecar
    recorder: RecordingDetector
    provider: TracerProvider
    providers: list[TracerProvider] = field(default_factory=list)

    def flush(self) -> None:
        self.provider.force_flush()

    def traces(self, count: int, timeout: float = 30.0) -> list[RagTrace]:
        """Flush the exporter, then wait until the sidecar emitted ``count`` RAG requests."""
        self.flush()
        wait_until(lambda: len(self.recorder.traces) >= count, timeout=timeout)
        return sorted(self.recorder.traces, key=lambda trace: trace.time)

    def metric(self, name: str, **labels: str) -> float:
        return sample(self.sidecar.registry, name, **labels)


@contextmanager
def running_sidecar(sections: dict[str, Any]) -> Iterator[Conformance]:
    """A sidecar with a recording detector and a ``TracerProvider`` exporting to it, with
    ``sections`` merged into the conformance defaults."""
    recorder = RecordingDetector()
    merged: dict[str, Any] = {
        "collectors": {
            "otlp": {"grpc": {"enabled": False}},
            "spans": {"assembly": {"grace_s": 0.3}},
        },
        "detectors": {"faithfulness": {"enabled": False}, "drift": {"enabled": False}},
    }
    merge_sections(merged, sections)
    config = make_config(**merged)
    sidecar = Sidecar(config, SidecarRegistry(), extra_detectors=[recorder])
    sidecar.start()
    assert sidecar.http is not None
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{sidecar.http.port}/v1/traces")
    provider = TracerProvider(resource=Resource.create({"service.name": "rag-app"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=100))
    try:
        yield Conformance(sidecar, recorder, provider)
    finally:
        provider.shutdown()
        sidecar.shutdown()


@pytest.fixture
def conformance(request: pytest.FixtureRequest) -> Iterator[Conformance]:
    """A running sidecar (``running_sidecar``); config sections given by indirect
    parametrization are merged into the defaults."""
    with running_sidecar(getattr(request, "param", {})) as running:
        yield running


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAI]:
    """The fake OpenAI-compatible endpoint on a loopback port."""
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


def instrumented(instrumentor: Any, provider: TracerProvider) -> Callable[[], None]:
    """Instrument with ``instrumentor`` on ``provider``; returns the undo."""
    instrumentor.instrument(tracer_provider=provider)
    return instrumentor.uninstrument
