"""Wiring: build the pipeline, detectors, collectors and servers from a ``Config``."""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Sequence

import structlog
from prometheus_client import CollectorRegistry

from monitor.components import (
    BuildContext,
    CollectorComponent,
    Receiver,
    load_collectors,
    load_components,
)
from monitor.config import Config
from monitor.detector import Detector
from monitor.pipeline import Pipeline, PipelineMetrics, TraceAssembly
from monitor.server import MetricsServer, Readiness
from monitor.worker import supervisor

log = structlog.get_logger("rag_monitor")


def build_detectors(config: Config, registry: CollectorRegistry) -> list[Detector]:
    """One detector per registered component, in component order."""
    context = BuildContext(registry=registry, state_dir=config.service.state_dir, root=config)
    detectors = []
    for component in load_components():
        # A component without settings has no key under ``detectors:``.
        section = getattr(config.detectors, component.name, None)
        detectors.append(component.build(section or component.config_model(), context))
    return detectors


class Sidecar:
    """The running service. ``start`` then ``shutdown`` (stop intake, drain, commit)."""

    def __init__(
        self,
        config: Config,
        registry: CollectorRegistry | None = None,
        extra_detectors: Sequence[Detector] = (),
    ) -> None:
        self.config = config
        self.registry = registry or CollectorRegistry()
        self.readiness = Readiness()
        collectors = load_collectors()
        self.pipeline = Pipeline(
            _trace_assembly(config, collectors),
            [*build_detectors(config, self.registry), *extra_detectors],
            PipelineMetrics(self.registry),
        )
        self.readiness.add("pipeline", self.pipeline.alive)
        self.receivers: dict[str, Receiver] = {}
        for collector in collectors:
            receiver = collector.build(config, self.pipeline)
            if receiver is not None:
                self.receivers[collector.name] = receiver
                self.readiness.add(collector.name, receiver.ready)
        self.http = self.receivers.get("otlp_http")
        self.grpc = self.receivers.get("otlp_grpc")
        metrics = config.service.metrics
        self.metrics_server = MetricsServer(
            metrics.host,
            metrics.port,
            self.registry,
            self.readiness,
            health=supervisor(self.registry).failing,
        )
        self._stopped = threading.Event()

    def start(self) -> None:
        self.metrics_server.start()
        self.pipeline.start()
        for receiver in self.receivers.values():
            receiver.start()
        log.info(
            "started",
            metrics_port=self.metrics_server.port,
            otlp_http_port=self.http.port if self.http else None,
            otlp_grpc_port=self.grpc.port if self.grpc else None,
        )

    def shutdown(self) -> None:
        """Stop intake, drain the pipeline, commit Kafka offsets, stop serving. Safe twice."""
        for receiver in self.receivers.values():
            receiver.stop_intake()
        self.pipeline.shutdown()
        for receiver in self.receivers.values():
            receiver.shutdown()
        self.metrics_server.shutdown()
        self._stopped.set()

    def run_until_signal(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down gracefully.

        This owns the process, so it also sets the garbage collector up for it.
        """
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        self.start()
        tune_garbage_collector()
        stop.wait()
        log.info("stopping")
        self.shutdown()
        log.info("stopped")


def _trace_assembly(config: Config, collectors: Sequence[CollectorComponent]) -> TraceAssembly:
    """The assembly of the one collector component that provides it."""
    assemblies = [c for c in collectors if c.assembly is not None]
    if len(assemblies) != 1:
        names = [c.name for c in assemblies]
        raise RuntimeError(f"expected one collector component with a span assembly, got {names}")
    build = assemblies[0].assembly
    assert build is not None
    return build(config)


def tune_garbage_collector() -> None:
    """Cyclic GC settings for a process that ingests spans all day.

    Ingest allocates thousands of container objects per 512-span request,
    many alive until their trace is assembled. With the defaults the collector
    ran every 700 allocations and its full passes re-scanned every module and
    table loaded at start-up: about 15% of the sidecar's CPU
    (tests/perf/bench_ingest.py). Freezing takes what exists after start-up
    out of collection for good; a larger first threshold lets short-lived
    objects die by reference count before a collection looks at them.
    """
    gc.freeze()
    gc.set_threshold(50_000)
