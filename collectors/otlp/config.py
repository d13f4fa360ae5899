"""``collectors.otlp``: the OTLP/HTTP and OTLP/gRPC receivers' ports and bounds.

The HTTP listener's settings are the core's (``monitor.contract.service_config.HttpListener``): the
review page serves with the same bounds. The bearer token both receivers require
is ``service.auth_token_env``, shared with every write endpoint of the sidecar.
"""

from __future__ import annotations

from pydantic import Field, model_validator

from monitor.contract.section import Section
from monitor.contract.service_config import HttpListener, Listener


class GrpcListener(Listener):
    """The OTLP/gRPC receiver's port and bounds."""

    max_concurrent_rpcs: int = Field(
        64, gt=0, description="RPCs running or waiting at most; beyond: RESOURCE_EXHAUSTED"
    )
    max_concurrent_streams: int = Field(
        16, gt=0, description="concurrent RPCs (HTTP/2 streams) on one connection"
    )
    keepalive_s: float = Field(
        60.0, gt=0, description="ping a silent client this often; a dead one is dropped"
    )
    handshake_timeout_s: float = Field(
        10.0, gt=0, description="a new connection must finish its HTTP/2 preface within this"
    )


class OtlpConfig(Section):
    """``collectors.otlp``: both OTLP receivers and the byte budget they share."""

    http: HttpListener = Field(
        default_factory=lambda: HttpListener(port=4318),
        description="OTLP/HTTP: POST /v1/traces, /v1/logs, /v1/labels, /v1/feedback",
    )
    grpc: GrpcListener = Field(
        default_factory=lambda: GrpcListener(port=4317),
        description="OTLP/gRPC TraceService/Export and LogsService/Export",
    )
    max_request_bytes: int = Field(
        8_388_608, gt=0, description="largest accepted request body, after decompression"
    )
    max_inflight_bytes: int = Field(
        67_108_864,
        gt=0,
        description="bytes of requests in flight at most, both receivers and all connections "
        "together (64 MiB, sized to the example pod's memory limit: docs, Deploy); "
        "past it a new body is refused before it is read: HTTP 503 + Retry-After, gRPC "
        "RESOURCE_EXHAUSTED; at least max_request_bytes",
    )

    @model_validator(mode="after")
    def _one_body_fits(self) -> OtlpConfig:
        if self.max_inflight_bytes < self.max_request_bytes:
            raise ValueError(
                "max_inflight_bytes must be at least max_request_bytes: a larger body "
                "would be refused forever"
            )
        return self
