"""The detectors.faithfulness section."""

from __future__ import annotations

from typing import Any, Literal, get_args
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from detectors.faithfulness.hhem import HHEM_REPO
from detectors.faithfulness.prices import Prices
from detectors.faithfulness.token_classifier import DEFAULT_TOKEN_MODEL
from monitor.contract.section import Patterns, Section
from monitor.contract.verdict_exports.config import PhoenixConfig

AlwaysSample = Literal["thumbs_down", "probe"]
JudgeKind = Literal["hhem", "token_classifier", "openai_compatible", "cascade"]
# The local judges a cascade can put first: each scores every sampled pair.
FirstJudgeKind = Literal["hhem", "token_classifier"]
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
    max_output_tokens: int | None = Field(
        None,
        gt=0,
        le=32_768,
        description="tokens one reply may use, sent as max_tokens (a reply cut there is "
        "malformed); null: none sent, except with judge: cascade, whose budget needs a bound "
        "on each reply: there null means 64 per claim of max_claims plus 64",
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

    def prices(self) -> Prices | None:
        """The configured prices, else the genai-prices table's entry for the model; None
        for a model in neither (self-hosted: its tokens are counted, not its cost)."""
        if self.input_usd_per_1m_tokens is None or self.output_usd_per_1m_tokens is None:
            return None if self.model is None else Prices.lookup(self.model)
        return Prices(self.input_usd_per_1m_tokens, self.output_usd_per_1m_tokens)


class TokenJudgeConfig(Section):
    """The token_classifier judge: a LettuceDetect or TinyLettuce token classifier marks the
    answer's tokens the contexts do not support."""

    model: str = Field(
        DEFAULT_TOKEN_MODEL,
        min_length=1,
        description="hub id (read from the local cache; `rag-monitor models fetch` fills it) "
        "or a directory holding config.json, the tokenizer and the weights: "
        "KRLabsOrg/tinylettuce-ettin-68m-en (68M parameters), tinylettuce-ettin-17m-en, "
        "lettucedect-base-modernbert-en-v1 (150M) or lettucedect-large-modernbert-en-v1",
    )
    max_length: int | None = Field(
        None,
        ge=64,
        le=32_768,
        description="tokens per model input (instructions, question, passages and answer); "
        "longer evidence is split into inputs at passage boundaries and each answer token "
        "keeps its highest hallucination probability; null: the model's maximum, at most "
        "4096 (the length these models were trained at)",
    )


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


class CascadeConfig(Section):
    """judge: cascade: a local judge scores every sampled answer; those it is unsure of go
    on to the LLM judge (llm_judge), within a rate and a spend budget."""

    first: FirstJudgeKind = Field(
        "hhem",
        description="the local judge that scores every sampled answer (its own settings: "
        "model, precision, ... for hhem)",
    )
    band_low: float = Field(
        0.3,
        ge=0,
        le=1,
        description="first judge's scores in [band_low, band_high] are uncertain and go to "
        "the LLM judge; set it from `rag-monitor report review` (cascade tiers)",
    )
    band_high: float = Field(
        0.7, ge=0, le=1, description="upper end of the uncertain band (see band_low)"
    )
    max_per_second: float = Field(
        2.0,
        gt=0,
        le=1000,
        description="answers sent to the LLM judge per second at most (two requests each); "
        "more in the band keep the first judge's verdict, counted refused_rate",
    )
    usd_per_hour: float | None = Field(
        None,
        gt=0,
        description="spend budget of the LLM judge in USD over any sliding hour, per process "
        "(N replicas or scorers spend up to N times it: set the total / N); an answer the "
        "budget cannot cover keeps the first judge's verdict, counted refused_budget; "
        "required with judge: cascade",
    )

    @field_validator("band_high")
    @classmethod
    def _band_ordered(cls, high: float, info: Any) -> float:
        low = info.data.get("band_low")
        if low is not None and high < low:
            raise ValueError(f"band_high ({high:g}) is below band_low ({low:g})")
        return high


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
        description="hhem (HHEM-2.1-Open on this process's CPU or GPU), token_classifier (a "
        "LettuceDetect token classifier on the CPU or GPU: token_classifier; it also finds "
        "the unsupported spans of the answer), openai_compatible (an LLM verifies the "
        "answer's claims: llm_judge) or cascade (a local judge on every answer, the LLM "
        "judge on those it is unsure of, within a USD budget: cascade)",
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
    token_classifier: TokenJudgeConfig = Field(
        default_factory=TokenJudgeConfig,
        description="judge: token_classifier: the checkpoint (hub id or directory) and the "
        "tokens per model input",
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
        "answer",
        description="hhem: unit scored (openai_compatible judges claims, token_classifier "
        "tokens of the whole answer)",
    )
    batch_size: int | None = Field(
        None,
        gt=0,
        description="hhem and token_classifier: pairs (token_classifier: model inputs) per "
        "model call (null: 1 on cpu, 8 on cuda)",
    )
    device: str = Field("cpu", description="hhem and token_classifier: torch device, cpu or cuda")
    precision: Literal["auto", "fp32", "bf16_autocast", "bf16", "int8", "onnx", "onnx_int8"] = (
        Field(
            "auto",
            description="hhem and token_classifier: auto (hhem: measure each at start-up, keep "
            "the fastest within precision_tolerance of fp32; token_classifier: fp32), fp32, "
            "bf16_autocast (bf16 matrix products; hhem: fp32 layer norms and classifier), bf16 "
            "(all weights), int8 (dynamic int8 Linear layers, cpu), and for hhem only onnx "
            "(ONNX Runtime, fp32, cpu) or onnx_int8 (ONNX Runtime, dynamic int8 weights, cpu)",
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
        description="hhem and token_classifier: torch intra-op threads (null: the cores the "
        "sidecar may use, its CPU "
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
    cascade: CascadeConfig = Field(
        default_factory=CascadeConfig,
        validate_default=True,
        description="judge: cascade: the first judge, the uncertain band, and the LLM "
        "judge's rate and USD budget",
    )

    @field_validator("llm_judge")
    @classmethod
    def _llm_judge_named(cls, llm_judge: LlmJudgeConfig, info: Any) -> LlmJudgeConfig:
        judge = info.data.get("judge")
        if judge in ("openai_compatible", "cascade"):
            for key in ("endpoint", "model"):
                if not getattr(llm_judge, key):
                    raise ValueError(f"{key} is required when judge is {judge}")
        return llm_judge

    @field_validator("cascade")
    @classmethod
    def _cascade_runnable(cls, cascade: CascadeConfig, info: Any) -> CascadeConfig:
        """A cascade holds the threshold inside its band (the band is the first judge's
        doubt about the verdict at the threshold), and has a budget in USD with a price to
        count it in."""
        if info.data.get("judge") != "cascade":
            return cascade
        threshold = info.data.get("threshold")
        if threshold is not None and not cascade.band_low <= threshold <= cascade.band_high:
            raise ValueError(
                f"the band [{cascade.band_low:g}, {cascade.band_high:g}] must hold the "
                f"threshold ({threshold:g}): the band is where the first judge's verdict at "
                "the threshold is in doubt"
            )
        if cascade.usd_per_hour is None:
            raise ValueError("usd_per_hour is required when judge is cascade")
        llm_judge = info.data.get("llm_judge")
        if llm_judge is None or llm_judge.model is None:
            return cascade  # llm_judge itself failed validation: reported there
        if llm_judge.prices() is None:
            raise ValueError(
                f"a budget in USD needs the LLM judge's prices, and genai-prices has none "
                f"for {llm_judge.model}: set llm_judge.input_usd_per_1m_tokens and "
                "output_usd_per_1m_tokens (0 and 0 for a model that costs nothing per token)"
            )
        return cascade

    @field_validator("granularity")
    @classmethod
    def _granularity_of_hhem(cls, granularity: str, info: Any) -> str:
        instead = {  # what each other judge reads instead of sentences
            "openai_compatible": "splits the answer into claims itself",
            "token_classifier": "judges each token of the answer",
        }
        judge = info.data.get("judge")
        if granularity == "sentence" and judge in instead:
            raise ValueError(f"sentence applies to the hhem judge; {judge} {instead[judge]}")
        return granularity

    @field_validator("precision")
    @classmethod
    def _int8_on_cpu(cls, precision: str, info: Any) -> str:
        on_cpu = str(info.data.get("device", "cpu")).startswith("cpu")
        if precision in ("int8", "onnx", "onnx_int8") and not on_cpu:
            raise ValueError(f"{precision} runs on cpu only; use auto, bf16 or fp32 on cuda")
        if precision in ("onnx", "onnx_int8") and info.data.get("judge") == "token_classifier":
            raise ValueError(
                f"{precision} applies to the hhem judge; token_classifier runs auto (fp32), "
                "fp32, bf16_autocast, bf16 or int8"
            )
        return precision

    @model_validator(mode="after")
    def _cascade_first_judge(self) -> FaithfulnessConfig:
        """A cascade's first judge gets the checks ``judge:`` naming it would give (the
        field validators above run before ``cascade`` is read)."""
        if self.judge != "cascade" or self.cascade.first != "token_classifier":
            return self
        if self.granularity == "sentence":
            raise ValueError(
                "granularity: sentence applies to the hhem judge; the cascade's first judge, "
                "token_classifier, judges each token of the answer"
            )
        if self.precision in ("onnx", "onnx_int8"):
            raise ValueError(
                f"precision: {self.precision} applies to the hhem judge; the cascade's first "
                "judge, token_classifier, runs auto (fp32), fp32, bf16_autocast, bf16 or int8"
            )
        return self
