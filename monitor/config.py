"""Configuration: the YAML file of DESIGN.md, validated by pydantic.

Every key has an environment override ``RAG_MONITOR_<SECTION>__<KEY>``
(``__`` separates nesting levels); its value is read as a YAML scalar, so
``RAG_MONITOR_DETECTORS__LATENCY__QUANTILES='[0.5, 0.9]'`` works.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from monitor.durations import Duration
from monitor.kafka_config import KafkaConfig

ENV_PREFIX = "RAG_MONITOR_"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Endpoint(_Section):
    host: str = Field("127.0.0.1", description="address to bind; loopback by default")
    port: int = Field(9464, ge=0, le=65535, description="TCP port (0 picks a free one)")


class Listener(Endpoint):
    enabled: bool = Field(True, description="start this receiver")


class ServiceConfig(_Section):
    metrics: Endpoint = Field(
        default_factory=Endpoint, description="where /metrics, /healthz and /readyz are served"
    )
    state_dir: Path = Field(
        Path("./rag-monitor-state"), description="drift reference, history, join state"
    )


class OtlpConfig(_Section):
    http: Listener = Field(
        default_factory=lambda: Listener(port=4318),
        description="OTLP/HTTP: POST /v1/traces, /v1/labels, /v1/feedback",
    )
    grpc: Listener = Field(
        default_factory=lambda: Listener(port=4317), description="OTLP/gRPC TraceService/Export"
    )
    auth_token_env: str | None = Field(
        None, description="name of an environment variable holding the required bearer token"
    )
    max_request_bytes: int = Field(
        8_388_608, gt=0, description="largest accepted request body, after decompression"
    )


class PhoenixConfig(_Section):
    enabled: bool = Field(False, description="connect to Phoenix (for the annotations below)")
    endpoint: str = Field("http://127.0.0.1:6006", description="Phoenix base URL")
    annotate: bool = Field(True, description="write faithfulness scores back as annotations")


class CollectorsConfig(_Section):
    otlp: OtlpConfig = Field(default_factory=OtlpConfig, description="OTLP receivers")
    kafka: KafkaConfig = Field(default_factory=KafkaConfig, description="Kafka consumer")
    phoenix: PhoenixConfig = Field(default_factory=PhoenixConfig, description="Phoenix annotations")


class AssemblyConfig(_Section):
    grace_s: float = Field(2.0, ge=0, description="wait after the root span for late children")
    ttl_s: float = Field(60.0, gt=0, description="emit a trace without root after this (expired)")
    max_pending_traces: int = Field(
        100_000, gt=0, description="traces held at most; the oldest is emitted early beyond it"
    )


SpanKind = Literal["LLM", "RETRIEVER", "RERANKER", "EMBEDDING", "CHAIN", "AGENT", "TOOL"]
_RAG_SPAN_KINDS: list[SpanKind] = ["LLM", "RETRIEVER"]


class MappingConfig(_Section):
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

    @field_validator("query_pointers", "answer_pointers")
    @classmethod
    def _json_pointers(cls, pointers: list[str]) -> list[str]:
        for pointer in pointers:
            if not pointer.startswith("/"):
                raise ValueError(f"{pointer!r} is not a JSON pointer (RFC 6901): start it with '/'")
        return pointers


class LatencyConfig(_Section):
    window_s: float = Field(300, gt=0, description="sliding window of the quantile gauges")
    quantiles: list[float] = Field(
        default_factory=lambda: [0.5, 0.95, 0.99], description="quantiles exported per stage"
    )

    @field_validator("quantiles")
    @classmethod
    def _in_unit_interval(cls, quantiles: list[float]) -> list[float]:
        if not all(0 < q < 1 for q in quantiles):
            raise ValueError("every quantile must be in (0, 1)")
        return quantiles


class ModelPrice(_Section):
    input_per_mtok: float = Field(0.0, ge=0, description="USD per million input tokens")
    output_per_mtok: float = Field(0.0, ge=0, description="USD per million output tokens")
    embedding_per_mtok: float = Field(0.0, ge=0, description="USD per million embedding tokens")
    rerank_per_kunit: float = Field(0.0, ge=0, description="USD per thousand rerank units")


class CostConfig(_Section):
    prices: Literal["genai-prices"] = Field("genai-prices", description="price table")
    overrides: dict[str, ModelPrice] = Field(
        default_factory=dict, description="model -> prices, for private deployments"
    )


AlwaysSample = Literal["thumbs_down", "probe"]


class FaithfulnessConfig(_Section):
    enabled: bool = Field(True, description="score a sample of answers with HHEM")
    model: str = Field(
        "vectara/hallucination_evaluation_model",
        description="hub id (read from the local cache) or a directory",
    )
    sample_rate: float = Field(0.02, gt=0, le=1, description="share of traces scored")
    always_sample: list[AlwaysSample] = Field(
        default_factory=lambda: list(get_args(AlwaysSample)), description="kinds always scored"
    )
    max_per_second: float = Field(5.0, gt=0, description="cap on scored traces per second")
    threshold: float = Field(0.5, ge=0, le=1, description="score at or above: consistent")
    granularity: Literal["answer", "sentence"] = Field("answer", description="unit scored")
    batch_size: int | None = Field(
        None, gt=0, description="pairs per model call (null: 1 on cpu, 8 on cuda)"
    )
    device: str = Field("cpu", description="torch device: cpu or cuda")
    precision: Literal["fp32", "bf16", "int8"] = Field(
        "fp32", description="weights: fp32, bf16, or int8 (dynamic int8 Linear layers, cpu only)"
    )
    threads: int | None = Field(
        None, gt=0, description="torch intra-op threads (null: torch's default)"
    )
    max_premise_tokens: int = Field(
        2048, gt=0, description="premise token budget; longer premises are cut and counted"
    )
    refusal_patterns: list[str] = Field(
        default_factory=lambda: [
            r"i (?:do not|don't|cannot|can't|am unable to|am not able to) "
            r"(?:know|answer|find|help)",
            r"i'm (?:not sure|unable to|not able to)",
            r"(?:sorry|unfortunately),? (?:but )?i (?:do not|don't|cannot|can't)",
            r"(?:there is|i have) (?:no|not enough) (?:information|context|data)",
            r"the (?:provided |given )?(?:context|documents?|sources?) (?:does|do) not "
            r"(?:contain|mention|say)",
        ],
        description="regexes (case-insensitive, matched at the answer's start) of refusals",
    )
    cache_size: int = Field(
        10_000, ge=0, description="scores kept in an LRU cache by (premise, answer); 0: off"
    )

    @field_validator("refusal_patterns")
    @classmethod
    def _compiles(cls, patterns: list[str]) -> list[str]:
        import re

        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"{pattern!r} is not a regular expression: {exc}") from exc
        return patterns

    @field_validator("precision")
    @classmethod
    def _int8_on_cpu(cls, precision: str, info: Any) -> str:
        if precision == "int8" and not str(info.data.get("device", "cpu")).startswith("cpu"):
            raise ValueError("int8 runs on cpu only; use bf16 or fp32 on cuda")
        return precision


class FilterExclusionConfig(_Section):
    golden_set: Path | None = Field(None, description="JSON lines of probe_id and gold_doc_ids")
    recall_k: list[int] = Field(default_factory=lambda: [5, 10], description="k of recall@k")
    join_ttl_s: float = Field(3600, gt=0, description="how long labels and traces wait to join")
    max_pending: int = Field(
        50_000, gt=0, description="labels and traces each held for a join; the oldest go first"
    )

    @field_validator("recall_k")
    @classmethod
    def _distinct_positive(cls, recall_k: list[int]) -> list[int]:
        if not recall_k or any(k < 1 for k in recall_k):
            raise ValueError("every k must be a positive integer, and at least one is needed")
        if len(set(recall_k)) != len(recall_k):
            raise ValueError("duplicate k: each k may appear once")
        return sorted(recall_k)


class DriftConfig(_Section):
    enabled: bool = Field(True, description="test query embeddings for drift")
    backend: Literal["scipy", "alibi"] = Field(
        "scipy",
        description="MMD implementation: scipy (Apache-2.0, ours) or alibi (alibi-detect 0.12+ "
        "is under the Business Source License 1.1: no production use without a Seldon licence)",
    )
    embedder: str | None = Field(None, description="null: use traced query vectors only")
    reference_size: int = Field(1000, gt=1, description="vectors in the reference window")
    window_size: int = Field(500, gt=1, description="vectors in each tested window")
    test_every_records: int = Field(250, gt=0, description="new vectors between tests")
    p_value: float = Field(0.05, gt=0, lt=1, description="significance level")
    n_permutations: int = Field(100, gt=0, description="permutations per test")
    keep_examples: bool = Field(
        False, description="keep a bounded sample of query texts per window for the report"
    )
    online: bool = Field(
        False, description="alibi only: MMDDriftOnline on every vector instead of window tests"
    )
    ert: float = Field(
        1000.0, gt=1, description="online: expected vectors between false alarms (ERT)"
    )
    n_bootstraps: int = Field(
        1000, gt=0, description="online: bootstrap samples that calibrate the thresholds"
    )

    @field_validator("online")
    @classmethod
    def _online_needs_alibi(cls, online: bool, info: Any) -> bool:
        settings = info.data
        if online and settings.get("backend") != "alibi":
            raise ValueError("online: true needs backend: alibi (MMDDriftOnline)")
        if online and settings.get("reference_size", 0) < 2 * settings.get("window_size", 0):
            raise ValueError("online: true needs reference_size >= 2 * window_size")
        return online


class DetectorsConfig(_Section):
    latency: LatencyConfig = Field(default_factory=LatencyConfig, description="stage latency")
    cost: CostConfig = Field(default_factory=CostConfig, description="cost per query")
    faithfulness: FaithfulnessConfig = Field(
        default_factory=FaithfulnessConfig, description="sampled HHEM faithfulness"
    )
    filter_exclusion: FilterExclusionConfig = Field(
        default_factory=FilterExclusionConfig, description="relevance-filter false exclusions"
    )
    drift: DriftConfig = Field(default_factory=DriftConfig, description="query-embedding drift")


class GuardrailsConfig(_Section):
    faithfulness_min: float = Field(
        0.85, ge=0, le=1, description="share of sampled answers at or above threshold"
    )
    latency_p95_slo_s: dict[str, float] = Field(
        default_factory=lambda: {"total": 1.5}, description="p95 SLO in seconds per stage"
    )
    false_exclusion_max: float = Field(0.02, ge=0, le=1, description="false-exclusion ratio")
    regeneration_band_sigma: float = Field(3.0, gt=0, description="control band width in sd")
    cost_per_query_max_usd: float = Field(0.02, gt=0, description="budget per query")
    for_: Duration = Field("10m", alias="for", description="how long a breach lasts")
    window: Duration = Field(
        "5m", description="rate window of every rule except the sampled ratios (sample_window)"
    )
    sample_window: Duration = Field(
        "1h", description="rate window of the sampled faithfulness and false-exclusion ratios"
    )
    baseline: Duration = Field("7d", description="history of the regeneration control band")
    min_events: int = Field(
        20, ge=1, description="denominator events a window needs before a ratio alert may fire"
    )
    job: str = Field("rag-monitor", description="Prometheus job scraping the sidecar")
    runbook_base: str = Field("README.md", description="document or URL of the runbook anchors")


class Config(_Section):
    service: ServiceConfig = Field(default_factory=ServiceConfig, description="the sidecar")
    collectors: CollectorsConfig = Field(
        default_factory=CollectorsConfig, description="trace sources"
    )
    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig, description="span assembly")
    mapping: MappingConfig = Field(
        default_factory=MappingConfig, description="spans -> RagTrace: where each field is found"
    )
    detectors: DetectorsConfig = Field(default_factory=DetectorsConfig, description="detectors")
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


def explain(defaults: BaseModel | None = None, prefix: str = "") -> Iterator[str]:
    """Yield ``key: default  # description`` for every key, for ``check-config --explain``.

    Defaults are read from a default instance, not from the field declarations:
    a parent's ``default_factory`` (``Listener(port=4318)``) overrides the
    nested model's own field defaults.
    """
    instance = Config() if defaults is None else defaults
    for name, field in type(instance).model_fields.items():
        key = f"{prefix}{field.alias or name}"
        value = getattr(instance, name)
        if isinstance(value, BaseModel):
            yield f"{key}:  # {field.description}"
            yield from explain(value, key + ".")
        else:
            yield f"{key}: {value!r}  # {field.description}"
