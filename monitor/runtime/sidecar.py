"""Wiring: build the pipeline, detectors, collectors and servers from a ``Config``."""

from __future__ import annotations

import gc
import resource
import signal
import threading
import time
from collections.abc import Sequence
from typing import Any

import structlog

from monitor.contract.components import (
    BuildContext,
    CollectorComponent,
    CollectorContext,
    EventHook,
    Receiver,
    load_collectors,
    load_components,
    write_token,
)
from monitor.contract.config import (
    Config,
    collector_section,
    detector_section,
    kafka_connection,
    require_extras,
    shared_values,
)
from monitor.contract.detector import Detector
from monitor.contract.http.endpoints import ComponentsUp, MetricsServer, Readiness
from monitor.contract.names import (
    ASSEMBLED_TRACES_TOTAL,
    HTTP_REFUSED_TOTAL,
    RECORDS_TOTAL,
    REQUESTS_TOTAL,
    WORKER_DROPPED_TOTAL,
    WORKER_UP,
)
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.work_items import TraceAssembly
from monitor.runtime.pipeline import Pipeline

log = structlog.get_logger("rag_monitor")


def build_detectors(
    config: Config, registry: SidecarRegistry, emit: EventHook | None = None
) -> list[Detector]:
    """One detector per registered component, in component order. ``emit`` is the hook
    their events go through once it is bound to the pipeline. Raises ``MissingExtraError``
    first when what the configuration enables is not installed."""
    require_extras(config)
    context = BuildContext(
        registry=registry,
        service=config.service,
        guardrails=config.guardrails,
        shared=shared_values(config),
        emit=emit or EventHook(),
        token=write_token(config.service.auth_token_env),
        kafka=kafka_connection(config),
    )
    return [
        component.build(detector_section(config, component), context)
        for component in load_components()
    ]


class Sidecar:
    """The running service. ``start`` then ``shutdown`` (stop intake, drain, commit)."""

    def __init__(
        self,
        config: Config,
        registry: SidecarRegistry | None = None,
        extra_detectors: Sequence[Detector] = (),
    ) -> None:
        self.config = config
        self.registry = registry or SidecarRegistry()
        self.readiness = Readiness()
        collectors = load_collectors()
        emit = EventHook()
        self.pipeline = Pipeline(
            _trace_assembly(config, collectors),
            [*build_detectors(config, self.registry, emit), *extra_detectors],
            PipelineMetrics(
                self.registry, config.service.variants, config.service.instrumentations
            ),
        )
        emit.bind(self.pipeline)
        self.readiness.add("pipeline", self.pipeline.alive)
        self.receivers: dict[str, Receiver] = {}
        context = CollectorContext(self.pipeline, write_token(config.service.auth_token_env))
        for collector in collectors:
            receiver = collector.build(collector_section(config, collector), context)
            if receiver is not None:
                self.receivers[collector.name] = receiver
                self.readiness.add(collector.name, receiver.ready)
        self.http = self.receivers.get("otlp_http")
        self.grpc = self.receivers.get("otlp_grpc")
        self.registry.register(ComponentsUp(self.readiness, lambda: _workers_up(self.registry)))
        metrics = config.service.metrics
        self.metrics_server = MetricsServer(
            metrics.host,
            metrics.port,
            self.registry,
            self.readiness,
            health=self.registry.supervisor.failing,
        )
        self._stopped = threading.Event()

    def start(self) -> None:
        self.metrics_server.start()
        self.pipeline.start()
        for receiver in self.receivers.values():
            receiver.start()
        ports = {f"{name}_port": receiver.port for name, receiver in self.receivers.items()}
        log.info(
            "started",
            metrics_port=self.metrics_server.port,
            **{name: port for name, port in ports.items() if port is not None},
        )

    def shutdown(self) -> None:
        """Stop in the order that loses nothing accepted. Safe twice.

        1. Every receiver stops taking work (HTTP answers 503 + Retry-After, gRPC
           refuses new RPCs, Kafka stops polling) and waits for what it is
           handling, so that everything answered OK has reached the pipeline.
        2. The pipeline drains its queue, emits every pending trace, stops the
           detectors' workers (each with a deadline; leftovers are counted in
           ``rag_monitor_worker_dropped_total``).
        3. Kafka commits what was processed; the receivers close.
        4. The metrics server, which answered throughout, stops last.
        """
        stoppers = [
            threading.Thread(target=receiver.stop_intake, name=f"stop-{name}")
            for name, receiver in self.receivers.items()
        ]
        for stopper in stoppers:  # in parallel: each waits for its own in-flight work
            stopper.start()
        for stopper in stoppers:
            stopper.join()
        self.pipeline.shutdown()
        for receiver in self.receivers.values():
            receiver.shutdown()
        self.metrics_server.shutdown()
        self._stopped.set()

    def run_until_signal(self) -> None:
        """Serve until SIGTERM or SIGINT, then shut down gracefully and log one ``stopped``
        line with the totals that show whether anything accepted was lost.

        This owns the process, so it also sets the open-file limit and the garbage
        collector up for it.
        """
        stop = threading.Event()
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
        raise_open_file_limit(sum(r.max_connections for r in self.receivers.values()))
        self.start()
        tune_garbage_collector()
        stop.wait()
        log.info("stopping")
        began = time.monotonic()
        self.shutdown()
        log.info("stopped", stop_s=round(time.monotonic() - began, 3), **stop_totals(self.registry))


# Beyond the connections: the metrics server's, state files, Kafka sockets, libraries.
_FILES_BESIDE_CONNECTIONS = 256

# The counters a ``stopped`` line reports: sample name -> key in the line.
_STOP_TOTALS = {
    REQUESTS_TOTAL: "traces",
    RECORDS_TOTAL: "records",
    ASSEMBLED_TRACES_TOTAL: "assembled",
    WORKER_DROPPED_TOTAL: "dropped",
    HTTP_REFUSED_TOTAL: "http_refused",
}


def stop_totals(registry: SidecarRegistry) -> dict[str, dict[str, int]]:
    """Counter totals for the ``stopped`` line, keyed by their label values joined with
    ``/``: traces by source, records by collector/outcome, assembled traces by outcome,
    items dropped by worker, HTTP refusals by server/reason. Variants are added up: the
    line answers "was everything accepted processed", whatever pipeline served it."""
    totals: dict[str, dict[str, int]] = {key: {} for key in _STOP_TOTALS.values()}
    for family in registry.collect():
        for sample in family.samples:
            key = _STOP_TOTALS.get(sample.name)
            if key is not None:
                labels = "/".join(v for k, v in sample.labels.items() if k != "variant")
                totals[key][labels] = totals[key].get(labels, 0) + int(sample.value)
    return totals


def raise_open_file_limit(connections: int) -> None:
    """Raise the soft RLIMIT_NOFILE to the hard limit so that ``max_connections`` is
    reachable; log what it got, and warn when that is still short."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):  # an unlimited hard limit can exceed the kernel's
            pass
    needed = connections + _FILES_BESIDE_CONNECTIONS
    report = log.warning if soft < needed else log.info
    report("open_file_limit", soft=soft, hard=hard, needed=needed)


def _workers_up(registry: SidecarRegistry) -> dict[str, bool]:
    """Supervised worker -> up, as its ``rag_monitor_worker_up`` sample reads."""
    return {
        sample.labels["worker"]: sample.value == 1
        for family in registry.supervisor.collect()
        if family.name == WORKER_UP
        for sample in family.samples
    }


def _trace_assembly(config: Config, collectors: Sequence[CollectorComponent[Any]]) -> TraceAssembly:
    """The assembly of the one collector component that provides it."""
    assemblies = [c for c in collectors if c.assembly is not None]
    if len(assemblies) != 1:
        names = [c.name for c in assemblies]
        raise RuntimeError(f"expected one collector component with a span assembly, got {names}")
    component = assemblies[0]
    assert component.assembly is not None
    return component.assembly(collector_section(config, component))


def tune_garbage_collector() -> None:
    """Cyclic GC settings for a process that ingests spans all day.

    Ingest allocates thousands of container objects per 512-span request,
    many alive until their trace is assembled. With the defaults the collector
    ran every 700 allocations and its full passes re-scanned every module and
    table loaded at start-up: about 15% of the sidecar's CPU
    (tests/perf/bench_ingest.py). Freezing takes what exists after start-up
    out of collection for good; a larger first threshold lets short-lived
    objects die by reference count before a collection looks at them. At 50,000 the
    young collections still took 4.7-5.3% of the sidecar's CPU under bench_ingest's OTLP
    traffic (16-18 of them in 80,000 traces, each looking at the spans of the traces
    still assembling); at 200,000, 1.7% (2 of them).
    """
    gc.freeze()
    gc.set_threshold(200_000)
