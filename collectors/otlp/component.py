"""The OTLP receivers' registrations (entry points ``otlp_http`` and ``otlp_grpc`` in
``rag_monitor.collectors``), both configured by the section ``collectors.otlp``.

Each receiver module is imported only when its component builds (grpc is slow to import);
the config module imports neither.
"""

from __future__ import annotations

from typing import Protocol

from collectors.otlp.config import OtlpConfig
from monitor.contract.components import CollectorComponent, CollectorContext, Receiver

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

    def __init__(self, server: _Server, max_connections: int) -> None:
        self.server = server
        self.max_connections = max_connections
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


def _otlp_http(otlp: OtlpConfig, context: CollectorContext) -> Receiver | None:
    if not otlp.http.enabled:
        return None
    from collectors.otlp.http import OtlpHttpReceiver

    receiver = OtlpHttpReceiver(otlp, context.consumer, context.token)
    return ListeningReceiver(receiver, otlp.http.max_connections)


def _otlp_grpc(otlp: OtlpConfig, context: CollectorContext) -> Receiver | None:
    if not otlp.grpc.enabled:
        return None
    from collectors.otlp.grpc import OtlpGrpcReceiver

    receiver = OtlpGrpcReceiver(otlp, context.consumer, context.token)
    return ListeningReceiver(receiver, otlp.grpc.max_connections)


_OTLP = "OTLP receivers"
OTLP_HTTP = CollectorComponent(
    name="otlp_http",
    config_model=OtlpConfig,
    description=_OTLP,
    section="otlp",
    build=_otlp_http,
    order=10,
)
OTLP_GRPC = CollectorComponent(
    name="otlp_grpc",
    config_model=OtlpConfig,
    description=_OTLP,
    section="otlp",
    build=_otlp_grpc,
    order=20,
)
