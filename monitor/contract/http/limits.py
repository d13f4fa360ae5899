"""The bounds of an HTTP server (``monitor/contract/http/service.py``) and the counter of what it
closes or refuses on its own, which the gRPC receiver shares for its budget refusals."""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client import Counter

from monitor.contract.names import HTTP_REFUSED_TOTAL
from monitor.contract.service_config import HttpListener
from monitor.contract.sidecar_registry import SidecarRegistry


def refused_counter(registry: SidecarRegistry) -> Counter:
    """``rag_monitor_http_refused_total{server,reason}``, shared by the servers of a registry
    (the gRPC receiver counts its budget refusals there too)."""
    return registry.family(
        Counter,
        HTTP_REFUSED_TOTAL,
        "Connections closed and requests refused by an HTTP server itself, before a "
        "handler saw them, by reason (max_connections, idle_evicted, idle_timeout, "
        "header_timeout, body_timeout, write_timeout, header_too_large, bad_request, "
        "stopping, inflight_bytes, handler_error).",
        ["server", "reason"],
    )


@dataclass(frozen=True)
class HttpLimits:
    """The server's bounds; ``monitor/contract/http/service.py``'s docstring says what each does."""

    max_connections: int = 1024
    handler_threads: int = 4
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    idle_timeout_s: float = 60.0
    max_header_bytes: int = 16_384

    @classmethod
    def of(cls, listener: HttpListener) -> HttpLimits:
        """The bounds configured on a listener (``collectors.otlp.http``, the review page)."""
        return cls(
            max_connections=listener.max_connections,
            handler_threads=listener.handler_threads,
            header_timeout_s=listener.header_timeout_s,
            body_timeout_s=listener.body_timeout_s,
            idle_timeout_s=listener.idle_timeout_s,
            max_header_bytes=listener.max_header_bytes,
        )
