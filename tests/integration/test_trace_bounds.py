"""Bounded work per trace: one OTLP request holding a 50,000-span chain (each span the parent
of the next) costs the pipeline seconds, not minutes, and the traffic behind it keeps flowing."""

from __future__ import annotations

import os
import time
from collections.abc import Callable

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from monitor.runtime.sidecar import Sidecar
from tests.conftest import sample, sdk_request, wait_until
from tests.integration.conftest import post

pytestmark = pytest.mark.integration

StartSidecar = Callable[..., Sidecar]
CHAIN_SPANS = 50_000
GRACE_S = 0.2
# The quadratic root search this guards against took 212 s on such a chain; the linear
# walk took under a second alone and 1.3 s once inside the full suite. Not a benchmark.
MAX_PIPELINE_S = 5.0
PROTOBUF = "application/x-protobuf"


def chain_request(length: int) -> bytes:
    """One OTLP request: a single trace of ``length`` minimal spans, each the parent of the
    next, the root first (about 3 MB in protobuf)."""
    request = ExportTraceServiceRequest()
    spans = request.resource_spans.add().scope_spans.add().spans
    trace_id = os.urandom(16)
    start = time.time_ns()
    parent = b""
    for i in range(length):
        span_id = (i + 1).to_bytes(8, "big")
        spans.add(
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent,
            name="s",
            start_time_unix_nano=start + i,
            end_time_unix_nano=start + 10**9 - i,
        )
        parent = span_id
    return request.SerializeToString()


@pytest.mark.parametrize(
    ("max_spans", "refused"), [(None, 45_000), (50_000, 0)], ids=["default-bound", "held-whole"]
)
def test_a_50k_span_chain_takes_seconds_not_minutes_and_traffic_keeps_flowing(
    start_sidecar: StartSidecar, max_spans: int | None, refused: int
) -> None:
    """The chain is accepted, refused beyond max_spans_per_trace (or held whole) and emitted,
    and a RAG request posted right after it is processed within grace_s + MAX_PIPELINE_S."""
    assembly: dict[str, float] = {"grace_s": GRACE_S}
    if max_spans is not None:
        assembly["max_spans_per_trace"] = max_spans
    sidecar = start_sidecar(collectors={"spans": {"assembly": assembly}})
    registry = sidecar.registry
    body = chain_request(CHAIN_SPANS)
    assert len(body) < 8 * 2**20  # within the default collectors.otlp.max_request_bytes

    status, _, _ = post(sidecar, "/v1/traces", body, PROTOBUF)
    assert status == 200
    accepted = time.monotonic()
    status, _, _ = post(sidecar, "/v1/traces", sdk_request(), PROTOBUF)
    assert status == 200

    def both_processed() -> bool:
        chain_done = sample(registry, "rag_monitor_assembled_traces_total", outcome="not_rag")
        return chain_done == 1 and sample(registry, "rag_requests_total", source="otlp") == 1

    wait_until(both_processed, timeout=30, every=0.01)
    pipeline_s = time.monotonic() - accepted - GRACE_S  # both wait grace_s after their root
    assert pipeline_s < MAX_PIPELINE_S, f"{pipeline_s:.2f}s of pipeline time"
    labels = {"collector": "otlp", "reason": "max_spans_per_trace"}
    assert sample(registry, "rag_monitor_refused_spans_total", **labels) == refused
    assert sample(registry, "rag_monitor_assembled_traces_total", outcome="complete") == 1
    assert sidecar.pipeline.alive()
