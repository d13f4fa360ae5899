"""SIGTERM under full load: every export answered 200 is processed, the process exits 0
within the Kubernetes grace period, and its ``stopped`` line carries the totals."""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.conftest import SidecarProcess, sdk_request, wait_until
from tests.integration.conftest import otlp_http_port

pytestmark = pytest.mark.integration

GRACE_PERIOD_S = 30  # terminationGracePeriodSeconds in deploy/kubernetes/deployment.yaml
CLIENTS = 4
TRACES_PER_EXPORT = 4
VECTOR = "embedding.embeddings.0.embedding.vector"
QUIET = {"faithfulness": {"enabled": False}, "drift": {"enabled": False}}
# Drift on with small windows, so that it writes to its store while the load runs.
DRIFT = {
    "faithfulness": {"enabled": False},
    "drift": {"reference_size": 20, "window_size": 20, "test_every_records": 20},
}


class ExportTemplate:
    """One SDK request of ``TRACES_PER_EXPORT`` traces, re-serialized with fresh trace ids
    and fresh query vectors (identical vectors give the drift test no bandwidth)."""

    def __init__(self) -> None:
        single = ExportTraceServiceRequest.FromString(sdk_request())
        self._request = ExportTraceServiceRequest()
        for _ in range(TRACES_PER_EXPORT):
            self._request.resource_spans.extend(single.resource_spans)
        self._lock = threading.Lock()

    def body(self) -> bytes:
        with self._lock:
            for resource_spans in self._request.resource_spans:
                trace_id = os.urandom(16)
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        span.trace_id = trace_id
                        for attribute in span.attributes:
                            if attribute.key == VECTOR:
                                for value in attribute.value.array_value.values:
                                    value.double_value = random.random()
            return self._request.SerializeToString()


class Client(threading.Thread):
    """Posts exports on one keep-alive connection as fast as it is answered; counts the
    traces of exports answered 200. Stops when the port refuses connections."""

    def __init__(self, port: int, template: ExportTemplate) -> None:
        super().__init__(daemon=True)
        self.port = port
        self.template = template
        self.accepted_traces = 0
        self.statuses: dict[int | str, int] = {}

    def run(self) -> None:
        connection: http.client.HTTPConnection | None = None
        body = self.template.body()
        while True:
            try:
                if connection is None:
                    connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
                    connection.connect()
                connection.request(
                    "POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"}
                )
                response = connection.getresponse()
                response.read()
            except ConnectionRefusedError:
                return  # the port is shut: the sidecar stopped listening
            except (OSError, http.client.HTTPException) as exc:
                self._note(type(exc).__name__)  # no answer: the export was not accepted
                connection = None
                continue
            self._note(response.status)
            if response.status == 200:
                self.accepted_traces += TRACES_PER_EXPORT
                body = self.template.body()
            if response.getheader("Connection", "").lower() == "close":
                connection.close()
                connection = None

    def _note(self, outcome: int | str) -> None:
        self.statuses[outcome] = self.statuses.get(outcome, 0) + 1


def stopped_line(log_path: Path) -> dict[str, Any]:
    for line in log_path.read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("event") == "stopped":
            return dict(json.loads(line))
    raise AssertionError(f"no stopped line in {log_path}")


def sigterm_under_load(sidecar: SidecarProcess, load_s: float) -> tuple[int, float, list[Client]]:
    """Start the clients, let them load the sidecar for ``load_s``, send SIGTERM; returns
    the exit code, the seconds from SIGTERM to exit, and the finished clients."""
    assert sidecar.process is not None
    sidecar.wait_ready()
    http_port = otlp_http_port(sidecar)
    template = ExportTemplate()
    clients = [Client(http_port, template) for _ in range(CLIENTS)]
    for client in clients:
        client.start()
    wait_until(lambda: sum(c.accepted_traces for c in clients) > 0, timeout=10)
    time.sleep(load_s)
    signalled = time.monotonic()
    sidecar.process.send_signal(signal.SIGTERM)
    code = sidecar.process.wait(GRACE_PERIOD_S + 30)
    took = time.monotonic() - signalled
    for client in clients:
        client.join(10)
        assert not client.is_alive()
    return code, took, clients


@pytest.mark.parametrize(
    ("detectors", "broken_state"),
    [(QUIET, False), (DRIFT, True)],
    ids=["plain", "drift-with-state-dir-under-a-file"],
)
def test_sigterm_under_load_processes_every_export_answered_200(
    sidecar_process: Callable[..., SidecarProcess],
    tmp_path: Path,
    detectors: dict[str, Any],
    broken_state: bool,
) -> None:
    """4 keep-alive clients post as fast as they can; after SIGTERM the traces of exports
    answered 200 equal the traces processed (the stopped line), the exit code is 0 and the
    stop fits the grace period; with drift writing to an unusable state dir as well."""
    service: dict[str, Any] = {}
    if broken_state:
        blocker = tmp_path / "not-a-directory"
        blocker.write_text("a regular file where the state dir's parent should be")
        service["state_dir"] = str(blocker / "state")
    config: dict[str, Any] = {
        "collectors": {"otlp": {"grpc": {"enabled": False}}},
        "detectors": detectors,
    }
    if service:
        config["service"] = service
    sidecar = sidecar_process(config).start()
    code, took, clients = sigterm_under_load(sidecar, load_s=3.0)
    accepted = sum(client.accepted_traces for client in clients)
    stopped = stopped_line(sidecar.log_path)
    statuses: dict[int | str, int] = {}
    for client in clients:
        for outcome, count in client.statuses.items():
            statuses[outcome] = statuses.get(outcome, 0) + count
    print(f"accepted={accepted} stopped={stopped} statuses={statuses} took={took:.2f}s")
    assert code == 0
    assert took < GRACE_PERIOD_S
    assert accepted > 0
    assert stopped["traces"].get("otlp", 0) == accepted
    # Nothing the pipeline queued was left behind (a detector worker's samples may be).
    assert stopped["dropped"].get("pipeline", 0) == 0
