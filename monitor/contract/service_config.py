"""The ``service:`` section: the sidecar's own settings (its /metrics port, its state
directory and byte budget, the variant and instrumentation allow-lists, the write
endpoints' token). Every detector may read it: the core hands it over as
``BuildContext.service``."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from monitor.contract.field_presence import DEFAULT_INSTRUMENTATIONS, MAX_INSTRUMENTATIONS
from monitor.contract.section import Section
from monitor.contract.state import DEFAULT_STATE_MAX_BYTES
from monitor.contract.variants import DEFAULT_VARIANTS, MAX_VARIANTS, AllowList, VariantList


class Endpoint(Section):
    host: str = Field("127.0.0.1", description="address to bind; loopback by default")
    port: int = Field(9464, ge=0, le=65535, description="TCP port (0 picks a free one)")


class ServiceConfig(Section):
    metrics: Endpoint = Field(
        default_factory=Endpoint, description="where /metrics, /healthz and /readyz are served"
    )
    state_dir: Path = Field(
        Path("./rag-monitor-state"), description="drift reference, history, join state"
    )
    state_max_bytes: int = Field(
        DEFAULT_STATE_MAX_BYTES,
        gt=0,
        description="byte budget of everything in state_dir (1 GiB): past 85% of it the drift "
        "store deletes its oldest samples, then references, then tests; "
        "rag_monitor_state_bytes and the RagMonitorStateNearFull alert (90%) watch it",
    )
    variants: VariantList = Field(
        default_factory=lambda: list(DEFAULT_VARIANTS),
        max_length=MAX_VARIANTS,
        description="allowed rag.variant values (the variant label of every guardrail series); "
        "production is implied and is the variant of a trace without rag.variant; others are "
        "exported as other and counted in rag_variant_folded_total",
    )
    auth_token_env: str | None = Field(
        None,
        description="name of an environment variable holding the bearer token every write "
        "endpoint requires (the OTLP receivers, /v1/labels, /v1/feedback, the review page)",
    )
    instrumentations: AllowList = Field(
        default_factory=lambda: list(DEFAULT_INSTRUMENTATIONS),
        max_length=MAX_INSTRUMENTATIONS,
        description="instrumentation scope names kept as the instrumentation label of "
        "rag_trace_fields_total (field coverage); others are exported as other, a trace "
        "without a scope name as none",
    )


class Listener(Endpoint):
    """A receiver's port and the bounds both OTLP servers share."""

    enabled: bool = Field(True, description="start this receiver")
    max_connections: int = Field(
        1024,
        gt=0,
        description="open connections at most; at the bound HTTP closes the longest-idle "
        "keep-alive connection to make room, or else refuses the new one (503); gRPC refuses it",
    )
    handler_threads: int = Field(
        4, gt=0, description="requests decoded and submitted at once; complete requests wait"
    )
    idle_timeout_s: float = Field(
        60.0, gt=0, description="a keep-alive connection idle this long is closed"
    )


class HttpListener(Listener):
    """The OTLP/HTTP receiver's port and bounds."""

    header_timeout_s: float = Field(
        10.0, gt=0, description="a request's head must arrive whole within this (slowloris)"
    )
    body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="a request's body must arrive whole within this after its head (a "
        "stalled body holds its share of the bytes-in-flight budget until then)",
    )
    max_header_bytes: int = Field(
        16_384, ge=1024, description="largest request head (request line + headers); else 431"
    )
