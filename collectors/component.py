"""The collectors' registrations (entry-point group ``rag_monitor.collectors``).

The sidecar finds its receivers and the span assembly here through the
registry, so the core never imports a collector. Each receiver module is
imported only when its component builds (grpc and kafka are slow to import).
"""

from __future__ import annotations

from typing import Any, Protocol

from monitor.components import CollectorComponent, Receiver
from monitor.intake import Consumer, TraceAssembly

# A request already in a handler when the stop begins gets this long to be answered:
# its submit waits 2 s at most, and the stop must fit the 30 s Kubernetes grace period.
STOP_INTAKE_S = 5.0


class _Server(Protocol):
    @property
    def port(self) -> int: ...
    def start(self) -> None: ...
    def stop_intake(self, timeout_s: float) -> bool: ...
    def shutdown(self) -> None: ...


class ListeningReceiver:
    """A server as a ``Receiver``: ready while listening. ``stop_intake`` returns once no
    request can still be accepted: new ones are refused (retry elsewhere) and those in
    progress have been answered, so that everything answered OK is in the pipeline."""

    def __init__(self, server: _Server) -> None:
        self.server = server
        self.listening = False

    @property
    def port(self) -> int:
        return self.server.port

    def ready(self) -> bool:
        return self.listening

    def start(self) -> None:
        self.server.start()
        self.listening = True

    def stop_intake(self) -> None:
        self.listening = False
        self.server.stop_intake(STOP_INTAKE_S)

    def shutdown(self) -> None:
        self.listening = False
        self.server.shutdown()


def _span_assembly(config: Any) -> TraceAssembly:
    from collectors.assembly import SpanAssembly

    return SpanAssembly(config.assembly, config.mapping)


def _otlp_http(config: Any, consumer: Consumer) -> Receiver | None:
    from collectors.otlp_http import OtlpHttpReceiver

    otlp = config.collectors.otlp
    return ListeningReceiver(OtlpHttpReceiver(otlp, consumer)) if otlp.http.enabled else None


def _otlp_grpc(config: Any, consumer: Consumer) -> Receiver | None:
    otlp = config.collectors.otlp
    if not otlp.grpc.enabled:
        return None
    from collectors.otlp_grpc import OtlpGrpcReceiver

    return ListeningReceiver(OtlpGrpcReceiver(otlp, consumer))


def _kafka(config: Any, consumer: Consumer) -> Receiver | None:
    if config.collectors.kafka.bootstrap_servers is None:
        return None
    from collectors.kafka import KafkaCollector

    return KafkaCollector(config.collectors.kafka, consumer)


SPANS = CollectorComponent(name="spans", assembly=_span_assembly, order=0)
OTLP_HTTP = CollectorComponent(name="otlp_http", build=_otlp_http, order=10)
OTLP_GRPC = CollectorComponent(name="otlp_grpc", build=_otlp_grpc, order=20)
KAFKA = CollectorComponent(name="kafka", build=_kafka, order=30)
