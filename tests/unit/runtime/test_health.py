"""Health of an in-process sidecar: /healthz follows the supervised threads, /readyz the
pipeline and receivers, rag_monitor_component_up both; a failing detector is isolated, and
/metrics answers through the stop."""

from __future__ import annotations

import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, ClassVar

import orjson
import pytest

from monitor.contract.detector import InlineDetector
from monitor.contract.http.endpoints import MetricsServer, Readiness
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace
from monitor.contract.work_items import WholeTrace
from monitor.runtime.sidecar import Sidecar
from tests.conftest import sample, wait_until

StartSidecar = Callable[..., Sidecar]
T0 = datetime(2026, 12, 3, tzinfo=UTC)
# No model, no drift: the only supervised thread is the pipeline's.
QUIET = {"detectors": {"faithfulness": {"enabled": False}, "drift": {"enabled": False}}}


class Raising(InlineDetector):
    """Raises ``error`` from every ``observe``; records the traces it saw."""

    name: ClassVar[str] = "raising"

    def __init__(self, error: BaseException) -> None:
        self.error = error
        self.seen: list[str] = []

    def observe(self, trace: RagTrace) -> None:
        self.seen.append(trace.trace_id)
        raise self.error


class AlsoRaising(Raising):
    name: ClassVar[str] = "after"


class SlowToStop(InlineDetector):
    """Its ``shutdown`` (the pipeline's drain) waits until ``release`` is set."""

    name: ClassVar[str] = "slow_to_stop"

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self.release = threading.Event()

    def shutdown(self) -> None:
        self.stopping.set()
        self.release.wait(10)


def get(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, orjson.loads(exc.read())


def trace(trace_id: str) -> WholeTrace:
    return WholeTrace(RagTrace(trace_id=trace_id, time=T0, source="otlp"))


def test_killing_the_pipeline_thread_turns_healthz_503_within_5_s(
    start_sidecar: StartSidecar,
) -> None:
    """A SystemExit from a detector ends the pipeline thread: /healthz answers 503 naming it
    within 5 s, /readyz fails its pipeline check, rag_monitor_worker_up reads 0."""
    sidecar = start_sidecar([Raising(SystemExit(1))], **QUIET)
    port = sidecar.metrics_server.port
    assert get(port, "/healthz") == (200, {"status": "ok"})
    assert sample(sidecar.registry, "rag_monitor_worker_up", worker="pipeline") == 1
    killed = time.monotonic()
    assert sidecar.pipeline.submit(trace("a"), timeout=1)
    wait_until(lambda: get(port, "/healthz")[0] == 503, timeout=5)
    assert time.monotonic() - killed < 5
    assert get(port, "/healthz") == (503, {"status": "failing", "workers": {"pipeline": "dead"}})
    status, body = get(port, "/readyz")
    assert status == 503
    assert body["checks"]["pipeline"] is False
    assert sample(sidecar.registry, "rag_monitor_worker_up", worker="pipeline") == 0
    assert sample(sidecar.registry, "rag_monitor_component_up", component="pipeline") == 0
    assert sidecar.pipeline.submit(trace("b"), timeout=1) is False


def test_component_up_follows_each_readiness_check_and_worker(
    start_sidecar: StartSidecar,
) -> None:
    """rag_monitor_component_up reads 1 per running receiver and the pipeline, and 0 for a
    receiver once its intake stopped, while the others stay 1."""
    sidecar = start_sidecar(**QUIET)
    registry = sidecar.registry
    for component in ("pipeline", "otlp_http", "otlp_grpc"):
        assert sample(registry, "rag_monitor_component_up", component=component) == 1
    sidecar.receivers["otlp_grpc"].stop_intake()
    assert sample(registry, "rag_monitor_component_up", component="otlp_grpc") == 0
    assert sample(registry, "rag_monitor_component_up", component="otlp_http") == 1
    assert sample(registry, "rag_monitor_component_up", component="pipeline") == 1


def test_a_detector_raising_an_exception_is_isolated(start_sidecar: StartSidecar) -> None:
    """An ordinary exception in a detector is counted per trace, the pipeline goes on with the
    next traces and detectors, and /healthz stays 200."""
    raising = Raising(RuntimeError("bug"))
    after = AlsoRaising(ValueError("also a bug"))
    sidecar = start_sidecar([raising, after], **QUIET)
    for trace_id in ("a", "b", "c"):
        assert sidecar.pipeline.submit(trace(trace_id), timeout=1)
    wait_until(lambda: after.seen == ["a", "b", "c"], timeout=5)
    registry = sidecar.registry
    assert raising.seen == ["a", "b", "c"]
    assert sample(registry, "rag_monitor_detector_errors_total", detector="raising") == 3
    assert sample(registry, "rag_monitor_detector_errors_total", detector="after") == 3
    assert sample(registry, "rag_requests_total", source="otlp") == 3
    assert get(sidecar.metrics_server.port, "/healthz") == (200, {"status": "ok"})
    assert get(sidecar.metrics_server.port, "/readyz")[1]["checks"]["pipeline"] is True


def test_healthz_names_every_failing_worker() -> None:
    """/healthz answers 503 with each failing worker and its problem, 200 when none fails."""
    failing: dict[str, str] = {"drift": "stalled", "kafka": "dead"}
    server = MetricsServer("127.0.0.1", 0, SidecarRegistry(), Readiness(), lambda: failing)
    server.start()
    try:
        assert get(server.port, "/healthz") == (
            503,
            {"status": "failing", "workers": {"drift": "stalled", "kafka": "dead"}},
        )
        failing.clear()
        assert get(server.port, "/healthz") == (200, {"status": "ok"})
    finally:
        server.shutdown()


def test_metrics_answer_while_the_pipeline_drains_after_intake_stopped(
    start_sidecar: StartSidecar,
) -> None:
    """During the drain the OTLP port is shut and /readyz is 503, while /metrics still
    answers; the stop ends once the drain does."""
    slow = SlowToStop()
    sidecar = start_sidecar([slow], **QUIET)
    assert sidecar.http is not None
    http_port, metrics_port = sidecar.http.port, sidecar.metrics_server.port
    stopper = threading.Thread(target=sidecar.shutdown)
    stopper.start()
    try:
        assert slow.stopping.wait(10)
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            assert response.status == 200
            assert b"rag_monitor_component_up" in response.read()
        status, body = get(metrics_port, "/readyz")
        assert (status, body["checks"]["otlp_http"]) == (503, False)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", http_port), timeout=5)
        assert stopper.is_alive()
    finally:
        slow.release.set()
        stopper.join(30)
    assert not stopper.is_alive()
