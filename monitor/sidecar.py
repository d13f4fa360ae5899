"""Wiring: build the pipeline, detectors, collectors and servers from a ``Config``."""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Sequence
from typing import Protocol

import structlog
from prometheus_client import CollectorRegistry

from detectors.cost import CostDetector
from detectors.drift.detector import DriftDetector
from detectors.faithfulness import FaithfulnessDetector
from detectors.feedback import FeedbackDetector
from detectors.filter_exclusion import FilterExclusionDetector
from detectors.latency import LatencyDetector
from monitor.config import Config
from monitor.detector import Detector
from monitor.pipeline import Pipeline, PipelineMetrics
from monitor.server import MetricsServer, Readiness
from monitor.worker import supervisor

log = structlog.get_logger("rag_monitor")


class Collector(Protocol):
    def start(self) -> None: ...
    def stop_intake(self) -> None: ...
    def shutdown(self) -> None: ...


class _Receiver(Protocol):
    def start(self) -> None: ...
    def shutdown(self) -> None: ...


class _ReceiverCollector:
    """A receiver whose intake stops when its server stops."""

    def __init__(self, receiver: _Receiver) -> None:
        self.receiver = receiver
        self.listening = False

    def start(self) -> None:
        self.receiver.start()
        self.listening = True

    def stop_intake(self) -> None:
        self.listening = False
        self.receiver.shutdown()

    def shutdown(self) -> None:
        self.stop_intake()


def build_detectors(config: Config, registry: CollectorRegistry) -> list[Detector]:
    return [
        LatencyDetector(config.detectors.latency, registry),
        CostDetector(config.detectors.cost, registry),
        FeedbackDetector(registry),
        FaithfulnessDetector(config.detectors.faithfulness, registry, config.collectors.phoenix),
        FilterExclusionDetector(config.detectors.filter_exclusion, registry),
        DriftDetector(config.detectors.drift, config.service.state_dir, registry),
    ]


class Sidecar:
    """The running service. ``start`` then ``shutdown`` (stop intake, drain, commit)."""

    def __init__(
        self,
        config: Config,
        registry: CollectorRegistry | None = None,
        extra_detectors: Sequence[Detector] = (),
    ) -> None:
        # Heavy or optional components are imported here, not at module import,
        # so that ``rag-monitor --help`` stays fast.
        from collectors.assembly import SpanAssembly
        from collectors.otlp_grpc import OtlpGrpcReceiver
        from collectors.otlp_http import OtlpHttpReceiver

        self.config = config
        self.registry = registry or CollectorRegistry()
        self.readiness = Readiness()
        self.pipeline = Pipeline(
            SpanAssembly(config.assembly, config.mapping),
            [*build_detectors(config, self.registry), *extra_detectors],
            PipelineMetrics(self.registry),
        )
        self.readiness.add("pipeline", self.pipeline.alive)
        otlp = config.collectors.otlp
        self.http = OtlpHttpReceiver(otlp, self.pipeline) if otlp.http.enabled else None
        self.grpc = OtlpGrpcReceiver(otlp, self.pipeline) if otlp.grpc.enabled else None
        self.collectors: list[Collector] = []
        for name, receiver in (("otlp_http", self.http), ("otlp_grpc", self.grpc)):
            if receiver is not None:
                wrapped = _ReceiverCollector(receiver)
                self.collectors.append(wrapped)
                self.readiness.add(name, lambda w=wrapped: w.listening)  # type: ignore[misc]
        if config.collectors.kafka.bootstrap_servers is not None:
            from collectors.kafka import KafkaCollector

            kafka = KafkaCollector(config.collectors.kafka, self.pipeline)
            self.collectors.append(kafka)
            self.readiness.add("kafka", kafka.ready)
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
        for collector in self.collectors:
            collector.start()
        log.info(
            "started",
            metrics_port=self.metrics_server.port,
            otlp_http_port=self.http.port if self.http else None,
            otlp_grpc_port=self.grpc.port if self.grpc else None,
        )

    def shutdown(self) -> None:
        """Stop intake, drain the pipeline, commit Kafka offsets, stop serving. Safe twice."""
        for collector in self.collectors:
            collector.stop_intake()
        self.pipeline.shutdown()
        for collector in self.collectors:
            collector.shutdown()
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
