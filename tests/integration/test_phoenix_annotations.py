"""Faithfulness scores written to a real `phoenix serve` as span annotations, read back
through Phoenix's API."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.verdict_exports.phoenix import ANNOTATION_NAME, PhoenixAnnotator
from monitor.runtime.sidecar import Sidecar
from tests.conftest import free_port, sample, wait_until
from tests.hhem_checkpoint import Tiny, build_checkpoint, reference_scores
from tests.otel_traffic import MemoryExporter, RagRequest, emit_rag_request, tracer_for

pytestmark = pytest.mark.integration

ANSWERS = ["Refunds are possible within 30 days.", "Shipping always costs 5 dollars."]


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`phoenix serve` on free loopback ports with a temporary working directory."""
    directory = tmp_path_factory.mktemp("phoenix")
    port = free_port()
    env = {
        **os.environ,
        "PHOENIX_WORKING_DIR": str(directory),
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(free_port()),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    with (directory / "phoenix.log").open("wb") as log:
        server = subprocess.Popen(
            [sys.executable, "-m", "phoenix.server.main", "serve"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            wait_until(lambda: _healthy(url) or server.poll() is not None, timeout=240, every=0.5)
            assert server.poll() is None, (directory / "phoenix.log").read_text()[-2000:]
            yield url
        finally:
            server.terminate()
            server.wait(30)


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    return build_checkpoint(tmp_path_factory.mktemp("hhem"))


def test_scores_become_span_annotations_on_the_root_span(
    phoenix: str, start_sidecar: Callable[..., Sidecar], tiny: Tiny
) -> None:
    """Each scored request's root span in Phoenix carries a faithfulness_hhem CODE annotation
    with the HHEM score and its consistent/hallucinated label."""
    from phoenix.client import Client

    directory, model = tiny
    memory = MemoryExporter()
    provider, tracer = tracer_for(memory)
    base = time.time_ns()
    for i, answer in enumerate(ANSWERS):
        emit_rag_request(
            tracer, RagRequest(start_ns=base + i * 10**9, extra={"output.value": answer})
        )
    provider.shutdown()
    roots = {
        format(span.context.span_id, "016x"): str(span.attributes["output.value"])  # type: ignore[index]
        for span in memory.spans
        if span.parent is None
    }
    # Phoenix first: it then holds the spans when the annotations arrive.
    assert OTLPSpanExporter(endpoint=f"{phoenix}/v1/traces").export(memory.spans).name == "SUCCESS"
    spans = Client(base_url=phoenix).spans
    wait_until(lambda: _span_ids(spans) >= set(roots), timeout=60, every=0.5)

    sidecar = start_sidecar(
        detectors={
            "faithfulness": {
                "model": str(directory),
                "sample_rate": 1.0,
                "precision": "fp32",
                "phoenix": {"enabled": True, "endpoint": phoenix, "annotate": True},
            }
        },
    )
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{sidecar.http.port}/v1/traces")  # type: ignore[union-attr]
    assert exporter.export(memory.spans).name == "SUCCESS"
    registry = sidecar.registry
    wait_until(
        lambda: sample(registry, "rag_faithfulness_annotations_total", outcome="written") == 2, 120
    )

    def annotations() -> list[Any]:
        found = spans.get_span_annotations(span_ids=list(roots), project_identifier="default")
        return found if len(found) == len(roots) else []

    found = wait_until(annotations, timeout=60, every=0.5)
    expected = dict(
        zip(
            ANSWERS,
            reference_scores(model, [("text of d1\n\ntext of d2", a) for a in ANSWERS]),
            strict=True,
        )
    )
    for annotation in found:
        score = expected[roots[annotation["span_id"]]]
        assert annotation["name"] == ANNOTATION_NAME
        assert annotation["annotator_kind"] == "CODE"
        assert annotation["result"]["score"] == pytest.approx(score, abs=1e-5)
        assert annotation["result"]["label"] == ("consistent" if score >= 0.5 else "hallucinated")
    assert sample(registry, "rag_faithfulness_annotations_total", outcome="failed") == 0


def test_an_unreachable_phoenix_is_counted_as_failed_annotations() -> None:
    """With nothing listening at the endpoint, the batch fails, is counted, and nothing blocks."""
    registry = SidecarRegistry()
    annotator = PhoenixAnnotator(
        f"http://127.0.0.1:{free_port()}", registry, threshold=0.5, flush_interval_s=0.1
    )
    annotator.start()
    try:
        started = time.perf_counter()
        for i in range(3):
            annotator.annotate(f"{i:016x}", 0.9)
        assert time.perf_counter() - started < 0.5
        wait_until(
            lambda: sample(registry, "rag_faithfulness_annotations_total", outcome="failed") == 3,
            120,
        )
    finally:
        annotator.shutdown()
    assert sample(registry, "rag_faithfulness_annotations_total", outcome="written") == 0


def _span_ids(spans: Any) -> set[str]:
    try:
        return {
            s["context"]["span_id"]
            for s in spans.get_spans(project_identifier="default", limit=100)
        }
    except Exception:  # the project appears with the first span
        return set()
