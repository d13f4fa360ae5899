"""Drift through the running sidecar: real OTLP/HTTP exporter, EMBEDDING spans, /metrics gauge."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import Tracer, set_span_in_context

from monitor.sidecar import Sidecar
from tests.conftest import sample, wait_until

pytestmark = pytest.mark.integration

DIM = 16
SIGNAL = "query_embedding"


def send_queries(tracer: Tracer, vectors: np.ndarray, topic: str) -> None:
    """One CHAIN root with an EMBEDDING child carrying the query vector and a RETRIEVER, per row."""
    for i, vector in enumerate(vectors):
        now = time.time_ns()
        root = tracer.start_span(
            "rag.request",
            start_time=now,
            attributes={"openinference.span.kind": "CHAIN", "input.value": f"{topic} {i}"},
        )
        child = tracer.start_span(
            "embed",
            context=set_span_in_context(root),
            start_time=now,
            attributes={
                "openinference.span.kind": "EMBEDDING",
                "embedding.embeddings.0.embedding.vector": [float(v) for v in vector],
            },
        )
        child.end(end_time=now + 5_000_000)
        # A retriever under a root with a query makes the trace a RAG request.
        tracer.start_span(
            "retrieve",
            context=set_span_in_context(root),
            start_time=now + 5_000_000,
            attributes={"openinference.span.kind": "RETRIEVER"},
        ).end(end_time=now + 9_000_000)
        root.end(end_time=now + 10_000_000)


@pytest.mark.parametrize("backend", ["scipy", "alibi"])
def test_drift_gauge_is_0_on_reference_traffic_and_1_after_a_shift(
    backend: str, tmp_path: Path, start_sidecar: Callable[..., Sidecar]
) -> None:
    """rag_drift_detected reads 0 for reference-like traffic and 1 after a query-mix shift."""
    sidecar = start_sidecar(
        service={"state_dir": str(tmp_path)},
        detectors={
            "drift": {
                "backend": backend,
                "reference_size": 150,
                "window_size": 100,
                "test_every_records": 100,
                "p_value": 0.01,
                "n_permutations": 100,
            }
        },
    )
    assert sidecar.http is not None
    provider = TracerProvider(resource=Resource.create({"service.name": "rag"}))
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"http://127.0.0.1:{sidecar.http.port}/v1/traces"),
            schedule_delay_millis=50,
        )
    )
    tracer = provider.get_tracer("drift-test")
    rng = np.random.default_rng(17)
    registry = sidecar.registry
    try:
        send_queries(tracer, rng.normal(size=(250, DIM)), "billing")
        provider.force_flush()
        wait_until(
            lambda: sample(registry, "rag_drift_tests_total", signal=SIGNAL, outcome="no_drift"),
            timeout=90,
        )
        assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 0

        shifted = rng.normal(size=(100, DIM))
        shifted[:, :4] += 1.5  # a new topic: four directions move by 1.5 sd
        send_queries(tracer, shifted, "shipping")
        provider.force_flush()
        wait_until(
            lambda: sample(registry, "rag_drift_tests_total", signal=SIGNAL, outcome="drift"),
            timeout=90,
        )
        assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 1
        assert sample(registry, "rag_drift_p_value", signal=SIGNAL) < 0.01
        assert sample(registry, "rag_drift_mmd_statistic", signal=SIGNAL) > 0
    finally:
        provider.shutdown()
    assert (tmp_path / "drift.sqlite3").exists()
