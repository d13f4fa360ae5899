"""Configuration: the YAML file (docs: the configuration reference), validated by pydantic.

The core sections are declared here; ``detectors:`` is assembled from the
registered detector components' own config models.

Every key has an environment override ``RAG_MONITOR_<SECTION>__<KEY>``
(``__`` separates nesting levels); its value is read as a YAML scalar, so
``RAG_MONITOR_DETECTORS__LATENCY__QUANTILES='[0.5, 0.9]'`` works.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import CoreSchema

from monitor.components import load_components
from monitor.coverage import DEFAULT_INSTRUMENTATIONS, MAX_INSTRUMENTATIONS
from monitor.guardrails import GuardrailsConfig as GuardrailsConfig  # noqa: PLC0414 (re-exported)
from monitor.kafka_config import KafkaConfig
from monitor.section import Section
from monitor.state import DEFAULT_STATE_MAX_BYTES
from monitor.variants import DEFAULT_VARIANTS, MAX_VARIANTS, AllowList, VariantList

ENV_PREFIX = "RAG_MONITOR_"


class Endpoint(Section):
    host: str = Field("127.0.0.1", description="address to bind; loopback by default")
    port: int = Field(9464, ge=0, le=65535, description="TCP port (0 picks a free one)")


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
    instrumentations: AllowList = Field(
        default_factory=lambda: list(DEFAULT_INSTRUMENTATIONS),
        max_length=MAX_INSTRUMENTATIONS,
        description="instrumentation scope names kept as the instrumentation label of "
        "rag_trace_fields_total (field coverage); others are exported as other, a trace "
        "without a scope name as none",
    )


class OtlpConfig(Section):
    http: HttpListener = Field(
        default_factory=lambda: HttpListener(port=4318),
        description="OTLP/HTTP: POST /v1/traces, /v1/labels, /v1/feedback",
    )
    grpc: GrpcListener = Field(
        default_factory=lambda: GrpcListener(port=4317),
        description="OTLP/gRPC TraceService/Export",
    )
    auth_token_env: str | None = Field(
        None, description="name of an environment variable holding the required bearer token"
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


class PhoenixConfig(Section):
    enabled: bool = Field(False, description="connect to Phoenix (for the annotations below)")
    endpoint: str = Field("http://127.0.0.1:6006", description="Phoenix base URL")
    annotate: bool = Field(True, description="write faithfulness scores back as annotations")


class CollectorsConfig(Section):
    otlp: OtlpConfig = Field(default_factory=OtlpConfig, description="OTLP receivers")
    kafka: KafkaConfig = Field(default_factory=KafkaConfig, description="Kafka consumer")
    phoenix: PhoenixConfig = Field(default_factory=PhoenixConfig, description="Phoenix annotations")


class AssemblyConfig(Section):
    grace_s: float = Field(2.0, ge=0, description="wait after the root span for late children")
    ttl_s: float = Field(60.0, gt=0, description="emit a trace without root after this (expired)")
    max_pending_traces: int = Field(
        100_000, gt=0, description="traces held at most; the oldest is emitted early beyond it"
    )
    max_spans_per_trace: int = Field(
        5_000,
        gt=0,
        description="spans held per trace at most; further spans of that trace are refused "
        "(rag_monitor_refused_spans_total) and the trace is emitted with those it holds",
    )


SpanKind = Literal["LLM", "RETRIEVER", "RERANKER", "EMBEDDING", "CHAIN", "AGENT", "TOOL"]
_RAG_SPAN_KINDS: list[SpanKind] = ["LLM", "RETRIEVER"]


class MappingConfig(Section):
    """Where the span mapping finds each ``RagTrace`` field in traces it did not shape itself."""

    request_kinds: list[SpanKind] = Field(
        default_factory=lambda: list(_RAG_SPAN_KINDS),
        description="a trace is a RAG request when it holds a span of one of these kinds "
        "(kinds other than LLM only with a query); others count as not_rag",
    )
    query_pointers: list[str] = Field(
        default_factory=lambda: ["/query", "/question", "/query_str", "/input"],
        description="JSON pointers into the request span's JSON input.value, tried in order",
    )
    answer_pointers: list[str] = Field(
        default_factory=lambda: ["/answer", "/response", "/output", "/result", "/content"],
        description="JSON pointers into the request span's JSON output.value, tried in order",
    )
    doc_id_keys: list[str] = Field(
        default_factory=lambda: ["doc_id", "document_id", "ref_doc_id", "source_id"],
        description="document metadata keys holding the source document id; the span's "
        "document id then becomes the chunk id",
    )
    tenant_metadata_key: str = Field(
        "tenant", description="key of the caller's tenant in the request's metadata JSON"
    )
    tenant_resource_attribute: str = Field(
        "rag.tenant", description="resource attribute read for the tenant when spans lack one"
    )
    first_token_events: list[str] = Field(
        default_factory=lambda: ["first_token", "First Token Stream Event"],
        description="span event names that mark the first streamed token",
    )
    document_attributes: list[str] = Field(
        default_factory=list,
        description="span attributes holding a request's documents (JSON objects, NAME.N.*)",
    )

    @field_validator("query_pointers", "answer_pointers")
    @classmethod
    def _json_pointers(cls, pointers: list[str]) -> list[str]:
        for pointer in pointers:
            if not pointer.startswith("/"):
                raise ValueError(f"{pointer!r} is not a JSON pointer (RFC 6901): start it with '/'")
        return pointers


class DetectorsConfig(Section):
    """The ``detectors:`` section: one key per registered detector component with settings.

    Its fields are not declared here: ``detectors_model`` assembles them from the
    components' config models (``monitor/components.py``), so adding a detector
    edits no core module. Attribute access is typed ``Any``: a detector reads its
    own section through its own model's type.
    """

    if TYPE_CHECKING:

        def __getattr__(self, name: str) -> Any: ...


@functools.cache
def detectors_model() -> type[DetectorsConfig]:
    """The ``detectors:`` model: a field per component whose config model has fields."""
    fields: dict[str, Any] = {
        component.name: (
            component.config_model,
            Field(default_factory=component.config_model, description=component.description),
        )
        for component in load_components()
        if component.config_model.model_fields
    }
    return create_model("DetectorsConfig", __base__=DetectorsConfig, **fields)


def _default_detectors() -> DetectorsConfig:
    return detectors_model()()


class _AssembledDetectors:
    """Validates the ``detectors:`` section with the assembled model, built on first use."""

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return handler.generate_schema(detectors_model())


class Config(Section):
    # The ``detectors`` schema needs the registered components: build it on first
    # use, not at import, so that a component may import this module.
    model_config = ConfigDict(defer_build=True)

    service: ServiceConfig = Field(default_factory=ServiceConfig, description="the sidecar")
    collectors: CollectorsConfig = Field(
        default_factory=CollectorsConfig, description="trace sources"
    )
    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig, description="span assembly")
    mapping: MappingConfig = Field(
        default_factory=MappingConfig, description="spans -> RagTrace: where each field is found"
    )
    detectors: Annotated[DetectorsConfig, _AssembledDetectors()] = Field(
        default_factory=_default_detectors, description="detectors"
    )
    guardrails: GuardrailsConfig = Field(
        default_factory=GuardrailsConfig, description="alert thresholds"
    )


class ConfigError(Exception):
    """The configuration is invalid; ``problems`` lists every error with its key path."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"{source}: " + "; ".join(problems))


def load_config(path: Path | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read ``path`` (or the defaults), apply environment overrides, and validate."""
    source = str(path) if path else "defaults"
    raw: Any = {}
    if path is not None:
        try:
            raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(source, [f"cannot read: {exc}"]) from exc
        if not isinstance(raw, dict):
            raise ConfigError(source, ["the top level must be a mapping"])
    apply_env_overrides(raw, os.environ if environ is None else environ)
    try:
        return Config.model_validate(raw)
    except ValidationError as exc:
        raise ConfigError(source, list(_describe_errors(exc))) from exc


def apply_env_overrides(raw: dict[str, Any], environ: Mapping[str, str]) -> None:
    """Set ``RAG_MONITOR_A__B__C=value`` as ``raw[a][b][c] = yaml(value)``."""
    for name, value in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX) or "__" not in name[len(ENV_PREFIX) :]:
            continue
        keys = [key.lower() for key in name[len(ENV_PREFIX) :].split("__")]
        node = raw
        for key in keys[:-1]:
            child = node.get(key)
            if not isinstance(child, dict):
                child = node[key] = {}
            node = child
        try:
            node[keys[-1]] = yaml.safe_load(value)
        except yaml.YAMLError:
            node[keys[-1]] = value


def _describe_errors(exc: ValidationError) -> Iterator[str]:
    for error in exc.errors():
        path = ".".join(str(part) for part in error["loc"])
        # A mapping is not echoed: it can hold passwords (collectors.kafka.security).
        shown = error["type"] != "missing" and not isinstance(error["input"], dict)
        got = f" (got {error['input']!r})" if shown else ""
        if error["type"] == "extra_forbidden":
            yield f"{path}: unknown key"
        else:
            yield f"{path}: {error['msg']}{got}"


@dataclass(frozen=True)
class ConfigKey:
    """One key of the configuration: its dotted path, its default (None for a section,
    which has keys of its own) and its one-line description."""

    path: str
    default: Any
    description: str
    section: bool


def config_keys(defaults: BaseModel | None = None, prefix: str = "") -> Iterator[ConfigKey]:
    """Every key, sections before their keys, in declaration order: what ``--explain``
    prints and the docs site's configuration reference lists.

    Defaults are read from a default instance, not from the field declarations:
    a parent's ``default_factory`` (``Listener(port=4318)``) overrides the
    nested model's own field defaults.
    """
    instance = Config() if defaults is None else defaults
    for name, field in type(instance).model_fields.items():
        key = f"{prefix}{field.alias or name}"
        value = getattr(instance, name)
        description = field.description or ""
        if isinstance(value, BaseModel):
            yield ConfigKey(key, None, description, section=True)
            yield from config_keys(value, key + ".")
        else:
            if isinstance(value, dict) and any(isinstance(v, BaseModel) for v in value.values()):
                # a map of sections (guardrails.latency_slo) reads as the YAML it came from
                value = {k: v.model_dump(by_alias=True) for k, v in value.items()}
            yield ConfigKey(key, value, description, section=False)


def explain() -> Iterator[str]:
    """Yield ``key: default  # description`` for every key, for ``check-config --explain``."""
    for key in config_keys():
        if key.section:
            yield f"{key.path}:  # {key.description}"
        else:
            yield f"{key.path}: {key.default!r}  # {key.description}"
