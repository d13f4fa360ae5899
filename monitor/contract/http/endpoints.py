"""The sidecar's own endpoints /metrics, /healthz and /readyz, its readiness checks and
``rag_monitor_component_up``. The server under them is ``monitor/contract/http/service.py``'s."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import orjson
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder

from monitor.contract.http.limits import HttpLimits
from monitor.contract.http.service import HttpService
from monitor.contract.http.wire import Request, Response
from monitor.contract.names import COMPONENT_UP
from monitor.contract.sidecar_registry import SidecarRegistry


class Readiness:
    """Named readiness checks; the sidecar is ready when all pass."""

    def __init__(self) -> None:
        self._checks: dict[str, Callable[[], bool]] = {}

    def add(self, name: str, check: Callable[[], bool]) -> None:
        self._checks[name] = check

    def status(self) -> dict[str, bool]:
        return {name: bool(check()) for name, check in self._checks.items()}


class ComponentsUp:
    """``rag_monitor_component_up{component}``: 1 while a component's readiness check passes
    and its supervised worker runs and beats, else 0; a name that is both (``pipeline``)
    is up only when both are."""

    def __init__(self, readiness: Readiness, workers: Callable[[], Mapping[str, bool]]) -> None:
        self._readiness = readiness
        self._workers = workers

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    def collect(self) -> Iterable[Metric]:
        up = self._readiness.status()
        for name, worker_up in self._workers().items():
            up[name] = up.get(name, True) and worker_up
        family = self._family()
        for name in sorted(up):
            family.add_metric([name], 1 if up[name] else 0)
        return [family]

    @staticmethod
    def _family() -> GaugeMetricFamily:
        return GaugeMetricFamily(
            COMPONENT_UP,
            "1 while a component (receiver, pipeline, worker) is ready and alive, else 0.",
            labels=["component"],
        )


# Prometheus and probes use a few connections and send no body; these bounds are not
# configurable. A stray body is refused past 64 KiB in flight, never buffered whole.
METRICS_LIMITS = HttpLimits(max_connections=64, handler_threads=2, idle_timeout_s=120.0)
METRICS_INFLIGHT_BYTES = 65_536


class MetricsServer(HttpService):
    """Serves /metrics from ``registry``, /healthz (no supervised worker failing: ``health``
    names the failing ones) and /readyz (all checks pass)."""

    def __init__(
        self,
        host: str,
        port: int,
        registry: SidecarRegistry,
        readiness: Readiness,
        health: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self.registry = registry
        self.readiness = readiness
        self.health = health
        super().__init__(
            "metrics",
            host,
            port,
            METRICS_LIMITS,
            registry=registry,
            budget=registry.budget("metrics", METRICS_INFLIGHT_BYTES),
        )

    def refuse(self, request: Request) -> Response | None:
        if request.method != "GET":
            return Response(405, b"only GET\n", headers={"Allow": "GET"})
        return None

    def handle(self, request: Request) -> Response:
        if request.path == "/metrics":
            encoder, content_type = choose_encoder(request.headers.get("accept", ""))
            return Response(200, encoder(self.registry), content_type)
        if request.path == "/healthz":
            failing = self.health()
            if failing:
                body = orjson.dumps({"status": "failing", "workers": dict(failing)})
                return Response(503, body, "application/json")
            return Response(200, b'{"status":"ok"}', "application/json")
        if request.path == "/readyz":
            checks = self.readiness.status()
            ready = all(checks.values())
            body = orjson.dumps({"ready": ready, "checks": checks})
            return Response(200 if ready else 503, body, "application/json")
        return Response(404, b"not found\n")
