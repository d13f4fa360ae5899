"""Latency window quantiles, cost per query and feedback, on a fresh registry each."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price

from detectors.cost.config import CostConfig, ModelPrice
from detectors.cost.detector import CostDetector
from detectors.feedback.detector import FeedbackDetector
from detectors.latency.config import LatencyConfig
from detectors.latency.detector import LatencyDetector
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Feedback, RagTrace, Usage
from tests.conftest import sample

T0 = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)


def trace(**fields: object) -> RagTrace:
    return RagTrace(**{"trace_id": "ab", "time": T0, "source": "otlp", **fields})  # type: ignore[arg-type]


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_window_quantiles_within_one_percent_of_exact(seed: int) -> None:
    """p50/p95/p99 over 3,000 lognormal requests are within 1% of the exact quantiles."""
    registry = SidecarRegistry()
    detector = LatencyDetector(LatencyConfig(), registry)
    rng = np.random.default_rng(seed)
    generate = rng.lognormal(mean=-0.5, sigma=0.6, size=3000)
    retrieve = rng.lognormal(mean=-3.0, sigma=0.4, size=3000)
    for g, r in zip(generate, retrieve, strict=True):
        detector.observe(trace(stages={"generate": float(g), "retrieve": float(r)}))
    for stage, values in (("generate", generate), ("retrieve", retrieve)):
        for q in (0.5, 0.95, 0.99):
            exported = sample(
                registry, "rag_stage_latency_window_seconds", stage=stage, quantile=str(q)
            )
            exact = float(np.quantile(values, q, method="lower"))
            assert abs(exported - exact) / exact < 0.01, (stage, q)
    assert sample(registry, "rag_stage_latency_seconds_count", stage="generate") == 3000
    assert sample(registry, "rag_stage_latency_seconds_sum", stage="generate") == pytest.approx(
        float(generate.sum())
    )


def test_window_forgets_requests_older_than_window_s() -> None:
    """After window_s the old slow requests no longer count; the histogram keeps them."""
    clock = FakeClock()
    registry = SidecarRegistry()
    detector = LatencyDetector(LatencyConfig(window_s=60), registry, clock=clock)
    for _ in range(100):
        detector.observe(trace(stages={"total": 5.0}))
    clock.now += 30
    for _ in range(100):
        detector.observe(trace(stages={"total": 0.5}))
    assert sample(
        registry, "rag_stage_latency_window_seconds", stage="total", quantile="0.99"
    ) == pytest.approx(5.0, rel=0.01)
    clock.now += 40  # the slow ones are 70 s old, the fast ones 40 s
    assert sample(
        registry, "rag_stage_latency_window_seconds", stage="total", quantile="0.99"
    ) == pytest.approx(0.5, rel=0.01)
    clock.now += 100
    assert (
        registry.get_sample_value(
            "rag_stage_latency_window_seconds", {"stage": "total", "quantile": "0.99"}
        )
        is None
    )
    assert sample(registry, "rag_stage_latency_seconds_count", stage="total") == 200


def test_ttft_is_a_stage() -> None:
    """A trace's ttft lands in the histogram and the window under stage="ttft"."""
    registry = SidecarRegistry()
    LatencyDetector(LatencyConfig(), registry).observe(trace(stages={"ttft": 0.3}))
    assert sample(registry, "rag_stage_latency_seconds_sum", stage="ttft") == 0.3
    assert sample(
        registry, "rag_stage_latency_window_seconds", stage="ttft", quantile="0.5"
    ) == pytest.approx(0.3, rel=0.01)


def genai_price(model: str, provider: str, input_tokens: int, output_tokens: int) -> float:
    usage = PriceUsage(input_tokens=input_tokens, output_tokens=output_tokens)
    return float(calc_price(usage, model, provider_id=provider).total_price)


@pytest.mark.parametrize(
    ("model", "provider", "prompt", "completion"),
    [
        ("gpt-4o", "openai", 900, 120),
        ("gpt-4o-mini", "openai", 12_000, 800),
        ("claude-sonnet-4-5", "anthropic", 250_000, 2_000),  # tiered: long prompts cost more
        ("claude-3-5-haiku-latest", "anthropic", 3_000, 300),
    ],
    ids=["gpt-4o", "gpt-4o-mini", "claude-tiered", "claude-haiku"],
)
def test_cost_equals_genai_prices(model: str, provider: str, prompt: int, completion: int) -> None:
    """The observed cost is genai-prices' figure for the same model and tokens."""
    registry = SidecarRegistry()
    detector = CostDetector(CostConfig(), registry)
    detector.observe(trace(usage=(Usage(model, provider, prompt, completion),)))
    expected = genai_price(model, provider, prompt, completion)
    assert sample(registry, "rag_request_cost_usd_sum") == pytest.approx(expected, rel=1e-12)
    assert sample(registry, "rag_cost_usd_total", model=model) == pytest.approx(expected, rel=1e-12)


def test_request_cost_adds_embedding_and_generation() -> None:
    """Embedding tokens are priced as the embedding model's input; the request sums its models."""
    registry = SidecarRegistry()
    detector = CostDetector(CostConfig(), registry)
    usages = (
        Usage("text-embedding-3-small", "openai", embedding_tokens=40),
        Usage("gpt-4o", "openai", 900, 120),
    )
    detector.observe(trace(usage=usages))
    embedding = genai_price("text-embedding-3-small", "openai", 40, 0)
    generation = genai_price("gpt-4o", "openai", 900, 120)
    assert sample(registry, "rag_request_cost_usd_sum") == pytest.approx(embedding + generation)
    assert sample(registry, "rag_request_cost_usd_count") == 1
    assert sample(registry, "rag_cost_usd_total", model="text-embedding-3-small") == pytest.approx(
        embedding
    )


def test_overrides_price_private_models_including_embedding_and_rerank() -> None:
    """cost.overrides prices a private model's input, output, embedding and rerank units."""
    price = ModelPrice(
        input_per_mtok=1.0, output_per_mtok=2.0, embedding_per_mtok=0.1, rerank_per_kunit=2.0
    )
    config = CostConfig(overrides={"in-house-llm": price, "in-house-rerank": price})
    registry = SidecarRegistry()
    detector = CostDetector(config, registry)
    detector.observe(trace(usage=(
        Usage("in-house-llm", None, prompt_tokens=1_000_000, completion_tokens=500_000, embedding_tokens=1_000_000),
        Usage("in-house-rerank", None, rerank_units=3),
    )))  # fmt: skip
    assert sample(registry, "rag_request_cost_usd_sum") == pytest.approx(1.0 + 1.0 + 0.1 + 0.006)
    assert sample(registry, "rag_cost_usd_total", model="in-house-rerank") == pytest.approx(0.006)


def test_unknown_model_is_counted_unpriced_never_zero() -> None:
    """A request whose only model has no override and no table entry is counted unpriced,
    not observed as $0."""
    registry = SidecarRegistry()
    detector = CostDetector(CostConfig(), registry)
    detector.observe(trace(usage=(Usage("my-secret-llm", None, 10, 10),)))
    detector.observe(trace())
    assert sample(registry, "rag_cost_unpriced_requests_total", reason="unknown_model") == 1
    assert sample(registry, "rag_cost_unpriced_requests_total", reason="no_usage") == 1
    assert sample(registry, "rag_cost_requests_total", pricing="unpriced") == 2
    assert sample(registry, "rag_request_cost_usd_count") == 0


def test_one_unpriced_entry_leaves_the_priced_ones_counted_as_partial() -> None:
    """Priced entries always count; an unpriced one marks the request's cost partial."""
    registry = SidecarRegistry()
    detector = CostDetector(CostConfig(), registry)
    detector.observe(trace(usage=(
        Usage("gpt-4o", "openai", 1_000_000, 0), Usage("rerank-english-v3.0", "cohere", rerank_units=1),
        Usage("my-secret-llm", None, 10, 10),
    )))  # fmt: skip
    detector.observe(trace(usage=(Usage("gpt-4o", "openai", 1_000_000, 0),)))
    gpt_4o = detector.prices.cost(Usage("gpt-4o", "openai", 1_000_000, 0))[1]
    assert sample(registry, "rag_request_cost_usd_count") == 2
    assert sample(registry, "rag_request_cost_usd_sum") == pytest.approx(2 * gpt_4o)
    assert sample(registry, "rag_cost_usd_total", model="gpt-4o") == pytest.approx(2 * gpt_4o)
    assert sample(registry, "rag_cost_unpriced_requests_total", reason="unknown_model") == 1
    assert sample(registry, "rag_cost_requests_total", pricing="partial") == 1
    assert sample(registry, "rag_cost_requests_total", pricing="complete") == 1


def test_producer_cost_wins_and_unknown_models_are_labelled_other() -> None:
    """llm.cost.total is used as is; the model label is bounded to known models or 'other'."""
    registry = SidecarRegistry()
    detector = CostDetector(CostConfig(), registry)
    detector.observe(trace(cost_usd=0.5, usage=(Usage("gpt-4o", "openai", 10, 10),)))
    detector.observe(trace(cost_usd=0.25, usage=(Usage("my-secret-llm", None, 10, 10),)))
    assert sample(registry, "rag_request_cost_usd_sum") == 0.75
    assert sample(registry, "rag_cost_usd_total", model="gpt-4o") == 0.5
    assert sample(registry, "rag_cost_usd_total", model="other") == 0.25


def test_feedback_events_are_counted_by_kind() -> None:
    """Each feedback event increments its kind."""
    registry = SidecarRegistry()
    detector = FeedbackDetector(registry)
    for kind in ("thumbs_up", "thumbs_down", "thumbs_down", "regenerate", "copy"):
        detector.observe_event(Feedback("ab", kind))  # type: ignore[arg-type]
    assert sample(registry, "rag_feedback_events_total", kind="thumbs_down") == 2
    assert sample(registry, "rag_feedback_events_total", kind="regenerate") == 1


def test_reask_in_the_same_session_within_60s_is_a_regeneration() -> None:
    """The same normalized query again in one session within 60 s counts as regenerate."""
    registry = SidecarRegistry()
    detector = FeedbackDetector(registry)

    def ask(query: str, session: str, seconds: float) -> None:
        detector.observe(
            trace(query=query, session_id=session, time=T0 + timedelta(seconds=seconds))
        )

    ask("What is the refund policy?", "s1", 0)
    ask("  what is the REFUND policy? ", "s1", 30)  # re-ask: counted
    ask("What is the refund policy?", "s2", 31)  # another session: not counted
    ask("What is the refund policy?", "s1", 200)  # too late: not counted
    ask("Something else", "s1", 201)
    assert sample(registry, "rag_feedback_events_total", kind="regenerate") == 1


def test_reask_map_is_bounded_and_holds_no_text() -> None:
    """The re-ask memory keeps at most max_tracked hashed keys."""
    detector = FeedbackDetector(SidecarRegistry(), max_tracked=10)
    for i in range(50):
        detector.observe(trace(query=f"question {i}", session_id="s"))
    keys = list(detector.reasks)
    assert len(keys) == 10
    assert all(isinstance(key, bytes) and b"question" not in key for key in keys)
