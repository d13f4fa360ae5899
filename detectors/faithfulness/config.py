"""The detectors.faithfulness section."""

from __future__ import annotations

from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import Field, field_validator

from detectors.faithfulness.hhem import HHEM_REPO
from monitor.section import Patterns, Section
from monitor.verdict_exports.config import PhoenixConfig

AlwaysSample = Literal["thumbs_down", "probe"]
JudgeKind = Literal["hhem", "openai_compatible"]
JudgeLocation = Literal["inline", "kafka"]


class LlmJudgeConfig(Section):
    """The openai_compatible judge: an LLM behind an OpenAI-compatible chat completions API."""

    endpoint: str | None = Field(
        None,
        description="base URL of the API, up to and including /v1 (requests go to "
        "<endpoint>/chat/completions); required with judge: openai_compatible",
    )
    model: str | None = Field(
        None, description="model name sent with each request; required with openai_compatible"
    )
    api_key_env: str | None = Field(
        None,
        description="environment variable holding the API key, sent as a Bearer token; "
        "null: no Authorization header (a local vLLM or Ollama)",
    )
    timeout_s: float = Field(
        30.0, gt=0, le=600, description="seconds one request may wait to connect and per read"
    )
    max_retries: int = Field(
        2,
        ge=0,
        le=10,
        description="retries of a request after a 429, a 5xx, a timeout or a lost connection, "
        "with exponential backoff or the server's Retry-After (at most 30 s)",
    )
    max_claims: int = Field(
        20, gt=0, le=200, description="claims verified per answer; more are cut and counted"
    )
    concurrency: int = Field(
        4, gt=0, le=64, description="answers judged at once (two requests each, in turn)"
    )
    input_usd_per_1m_tokens: float | None = Field(
        None,
        ge=0,
        description="price of 1M input tokens in USD, for rag_judge_cost_usd_total; both "
        "prices null: the genai-prices table's price for the model, no cost when it has none",
    )
    output_usd_per_1m_tokens: float | None = Field(
        None,
        ge=0,
        validate_default=True,
        description="price of 1M output tokens in USD (see input_usd_per_1m_tokens)",
    )

    @field_validator("endpoint")
    @classmethod
    def _http_url(cls, endpoint: str | None) -> str | None:
        if endpoint is None:
            return None
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError("must be an http:// or https:// URL such as http://vllm:8000/v1")
        return endpoint.rstrip("/")

    @field_validator("output_usd_per_1m_tokens")
    @classmethod
    def _both_prices(cls, output: float | None, info: Any) -> float | None:
        if (output is None) != (info.data.get("input_usd_per_1m_tokens") is None):
            raise ValueError("set input_usd_per_1m_tokens and output_usd_per_1m_tokens together")
        return output


class RemoteJudgingConfig(Section):
    """judge_location: kafka: sidecars publish sampled pairs, ``rag-monitor score`` judges."""

    requests_topic: str = Field(
        "rag-judge-requests",
        min_length=1,
        description="topic the sidecars publish sampled pairs to (keyed by trace id)",
    )
    results_topic: str = Field(
        "rag-judge-results",
        min_length=1,
        description="topic the scorers publish their verdicts to (JudgeScore, UnscoredAnswer); "
        "every sidecar reads it whole",
    )
    group_id: str = Field(
        "rag-judge-scorers",
        min_length=1,
        description="the scorers' consumer group on requests_topic",
    )
    floor_burst_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="the scorers keep min_scored_per_hour per service at an even rate; this "
        "many seconds of it are saved at most, judged at once when candidates come after a "
        "quiet spell (and at a scorer's start)",
    )
    dedupe_size: int = Field(
        100_000,
        gt=0,
        description="trace ids a scorer remembers (its own and the results topic's) to count "
        "a redelivered pair as a duplicate instead of scoring it again",
    )


class FaithfulnessConfig(Section):
    enabled: bool = Field(True, description="score a sample of answers for faithfulness")
    judge_location: JudgeLocation = Field(
        "inline",
        description="inline (the sidecar runs the judge) or kafka (the sidecar samples and "
        "publishes pairs to remote.requests_topic, never loads a model; `rag-monitor score` "
        "judges them and publishes the scores back)",
    )
    remote: RemoteJudgingConfig = Field(
        default_factory=RemoteJudgingConfig,
        description="judge_location: kafka: topics, the scorers' group, the floor's burst",
    )
    judge: JudgeKind = Field(
        "hhem",
        description="hhem (HHEM-2.1-Open on this process's CPU or GPU) or openai_compatible "
        "(an LLM verifies the answer's claims: llm_judge)",
    )
    llm_judge: LlmJudgeConfig = Field(
        default_factory=LlmJudgeConfig,
        validate_default=True,
        description="the openai_compatible judge's endpoint, model, limits and prices",
    )
    model: str = Field(
        HHEM_REPO,
        description="hhem: hub id (read from the local cache; `rag-monitor models fetch` fills "
        "it) or a directory",
    )
    sample_rate: float = Field(0.02, gt=0, le=1, description="share of traces scored")
    always_sample: list[AlwaysSample] = Field(
        default_factory=lambda: list(get_args(AlwaysSample)), description="kinds always scored"
    )
    max_per_second: float = Field(
        5.0,
        gt=0,
        description="cap on scored traces per second (kafka: on published pairs per sidecar, "
        "and on a scorer's random stratum)",
    )
    min_scored_per_hour: float = Field(
        600,
        ge=0,
        description="floor of traces scored an hour: at low traffic the sample rate rises to "
        "reach it (within max_per_second), so the alert's bound has evidence; per replica "
        "inline, per service with judge_location: kafka (the scorers keep it once); 0: off",
    )
    threshold: float = Field(0.5, ge=0, le=1, description="score at or above: consistent")
    granularity: Literal["answer", "sentence"] = Field(
        "answer", description="hhem: unit scored (openai_compatible judges claims)"
    )
    batch_size: int | None = Field(
        None, gt=0, description="hhem: pairs per model call (null: 1 on cpu, 8 on cuda)"
    )
    device: str = Field("cpu", description="hhem: torch device, cpu or cuda")
    precision: Literal["auto", "fp32", "bf16_autocast", "bf16", "int8", "onnx", "onnx_int8"] = (
        Field(
            "auto",
            description="hhem: auto (measure each at start-up, keep the fastest within "
            "precision_tolerance of fp32), fp32, bf16_autocast (bf16 matrix products, fp32 layer "
            "norms and classifier), bf16 (all weights), int8 (dynamic int8 Linear layers, cpu), "
            "onnx (ONNX Runtime, fp32, cpu) or onnx_int8 (ONNX Runtime, dynamic int8 weights, cpu)",
        )
    )
    precision_tolerance: float = Field(
        0.01,
        ge=0,
        le=1,
        description="auto: the largest score change from fp32 allowed on the calibration set",
    )
    threads: int | None = Field(
        None,
        gt=0,
        description="torch intra-op threads (null: the cores the sidecar may use, its CPU "
        "affinity capped by its cgroup CPU quota)",
    )
    max_premise_tokens: int = Field(
        2048, gt=0, description="hhem: premise token budget; longer premises are cut and counted"
    )
    refusal_patterns: Patterns = Field(
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
    phoenix: PhoenixConfig = Field(
        default_factory=PhoenixConfig,
        description="write each score back to Phoenix as a span annotation (the phoenix extra)",
    )

    @field_validator("llm_judge")
    @classmethod
    def _llm_judge_named(cls, llm_judge: LlmJudgeConfig, info: Any) -> LlmJudgeConfig:
        if info.data.get("judge") == "openai_compatible":
            for key in ("endpoint", "model"):
                if not getattr(llm_judge, key):
                    raise ValueError(f"{key} is required when judge is openai_compatible")
        return llm_judge

    @field_validator("granularity")
    @classmethod
    def _granularity_of_hhem(cls, granularity: str, info: Any) -> str:
        if granularity == "sentence" and info.data.get("judge") == "openai_compatible":
            raise ValueError(
                "sentence applies to the hhem judge; openai_compatible splits the answer "
                "into claims itself"
            )
        return granularity

    @field_validator("precision")
    @classmethod
    def _int8_on_cpu(cls, precision: str, info: Any) -> str:
        on_cpu = str(info.data.get("device", "cpu")).startswith("cpu")
        if precision in ("int8", "onnx", "onnx_int8") and not on_cpu:
            raise ValueError(f"{precision} runs on cpu only; use auto, bf16 or fp32 on cuda")
        return precision
