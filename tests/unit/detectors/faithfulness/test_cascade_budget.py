"""judge: cascade without a network: the spend budget's accounting (admission against
spend, reservations and the pair's bound; the sliding window and its slots; no window
over the budget whatever the timing), the rate limit, the pair's cost bound, and the
cascade's settings, identity, batch size, model files and extras."""

from __future__ import annotations

import heapq
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.faithfulness.cascade_budget import (
    CLAIM_ENTRY_TOKENS,
    PairCostBound,
    RateLimit,
    SpendBudget,
    reply_token_bound,
)
from detectors.faithfulness.component import model_needs, require_extras
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.judge_contract import JudgePair, batch_size_for
from detectors.faithfulness.judge_identity import judge_identity
from detectors.faithfulness.prices import Prices
from detectors.faithfulness.worker import STALL_S, stall_after_s
from monitor.contract.extras import MissingExtraError
from monitor.runtime.config_loading import ConfigError, load_config


class Clock:
    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


# --- the budget ------------------------------------------------------------------------------


def test_a_pair_is_admitted_only_when_spend_held_bounds_and_its_bound_fit() -> None:
    """Budget 1.0: 0.4 charged and a bound of 0.3 held leave room for 0.3 exactly, not for
    more; released, the held bound makes room again, the charges stay."""
    clock = Clock()
    budget = SpendBudget(1.0, 100.0, clock=clock)
    budget.charge(0.4)
    held = budget.reserve(0.3)
    assert held is not None
    assert budget.reserve(0.31) is None  # 0.4 + 0.3 + 0.31 > 1
    exact = budget.reserve(0.3)  # 0.4 + 0.3 + 0.3 = 1: admitted
    assert exact is not None
    assert budget.spent() == pytest.approx(0.4)
    assert budget.reserved() == pytest.approx(0.6)
    budget.release(held)
    budget.release(exact)
    assert budget.spent() == pytest.approx(0.4)
    assert budget.reserved() == 0.0
    assert budget.reserve(0.6) is not None


def test_spend_leaves_the_window_a_whole_window_after_its_slot_ends() -> None:
    """Window 100 s in 10 slots of 10 s: a charge at 5 s (slot [0, 10)) still counts at
    109.9 s, a window after the slot's latest possible charge, and is gone at 110 s: the
    slots keep spend longer than the window, never shorter."""
    clock = Clock(5.0)
    budget = SpendBudget(1.0, 100.0, slots=10, clock=clock)
    budget.charge(0.9)
    clock.now = 104.9  # a window after the charge: an exact window would have let it go
    assert budget.spent() == pytest.approx(0.9)
    assert budget.reserve(0.2) is None
    clock.now = 109.9
    assert budget.spent() == pytest.approx(0.9)
    clock.now = 110.0
    assert budget.spent() == 0.0
    assert budget.reserve(1.0) is not None


def test_the_window_slides_it_does_not_reset() -> None:
    """A fixed hour would allow a whole budget at its end and another at the next one's
    start. Sliding: spend at 95 s blocks until 95 s + a window (plus the slot)."""
    clock = Clock(95.0)
    budget = SpendBudget(1.0, 100.0, slots=100, clock=clock)
    budget.charge(1.0)
    clock.now = 101.0  # a new "hour" of a fixed window
    assert budget.reserve(0.1) is None
    clock.now = 196.0
    assert budget.reserve(0.1) is not None


Schedule = list[tuple[float, float, float, float, float, float, float]]


@st.composite
def schedules(draw: st.DrawFn) -> Schedule:
    """Pairs in arrival order: (gap since the previous arrival, bound, the shares of the
    bound its two replies cost, the delays to the first reply, to the second, to the
    release)."""
    pairs: Schedule = []
    for _ in range(draw(st.integers(1, 60))):
        gap = draw(st.floats(0, 30))
        bound = draw(st.floats(0.05, 1.0))
        first = draw(st.floats(0, 1))
        second = draw(st.floats(0, 1 - first))
        d1, d2, d3 = (draw(st.floats(0, 40)) for _ in range(3))
        pairs.append((gap, bound, first, second, d1, d2, d3))
    return pairs


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_no_window_ever_holds_more_than_the_budget(schedule: Schedule) -> None:
    """The cascade's protocol under any timing: reserve a pair's bound at its arrival, its
    two replies charge at most the bound between then and the release. Whatever the
    arrivals and delays, every window [t, t + 100 s) of charges holds at most the budget
    (2.0, bounds up to 1.0, 10 slots)."""
    window, limit = 100.0, 2.0
    clock = Clock()
    budget = SpendBudget(limit, window, slots=10, clock=clock)
    # (time, order, kind, payload): at one instant charges come before releases (a pair
    # is released only after its replies), arrivals after both.
    events: list[tuple[float, int, int, str, Any]] = []
    at, seq = 0.0, 0
    for gap, bound, first, second, d1, d2, d3 in schedule:
        at += gap
        seq += 1
        heapq.heappush(events, (at, 2, seq, "arrive", (bound, first, second, d1, d2, d3)))
    charges: list[tuple[float, float]] = []
    while events:
        now, _, _, kind, payload = heapq.heappop(events)
        clock.now = now
        if kind == "arrive":
            bound, first, second, d1, d2, d3 = payload
            held = budget.reserve(bound)
            if held is None:
                continue
            for delay, usd in ((d1, bound * first), (d1 + d2, bound * second)):
                seq += 1
                heapq.heappush(events, (now + delay, 0, seq, "charge", usd))
            seq += 1
            heapq.heappush(events, (now + d1 + d2 + d3, 1, seq, "release", held))
        elif kind == "charge":
            budget.charge(payload)
            charges.append((now, payload))
        else:
            budget.release(payload)
    for start, _ in charges:
        in_window = sum(usd for t, usd in charges if start <= t < start + window)
        assert in_window <= limit + 1e-9


def test_the_rate_limit_allows_a_seconds_burst_then_its_rate() -> None:
    """2 per second: two at once, then none until half a second has refilled one."""
    clock = Clock()
    rate = RateLimit(2.0, clock=clock)
    assert [rate.take() for _ in range(3)] == [True, True, False]
    clock.now = 0.4
    assert not rate.take()
    clock.now = 0.5
    assert rate.take()
    slow = RateLimit(0.1, clock=clock)  # under one a second: a burst of one
    assert [slow.take(), slow.take()] == [True, False]


# --- the pair's bound ------------------------------------------------------------------------


def test_the_bound_counts_every_byte_of_the_requests_as_a_token() -> None:
    """1,000 more letters of premise raise the bound by 1,000 input tokens' price (they are
    in the verification request once); 1,000 more of answer by 1,000 (the extraction
    request only). The output is max_tokens a request; the claims' tokens and their
    numbering are the second request's input."""
    prices = Prices(input_per_mtok=2.0, output_per_mtok=8.0)
    bound = PairCostBound("judge-model", 4, 100, prices)
    pair = JudgePair("The parcel left on Monday.", "It left on Monday.", "when?")
    longer_premise = JudgePair(pair.premise + "x" * 1000, pair.answer, pair.question)
    longer_answer = JudgePair(pair.premise, pair.answer + "y" * 1000, pair.question)
    per_input_token = 2.0 / 1e6
    assert bound(longer_premise) - bound(pair) == pytest.approx(1000 * per_input_token)
    assert bound(longer_answer) - bound(pair) == pytest.approx(1000 * per_input_token)
    fixed = 2 * 100 * 8.0 / 1e6 + (100 + CLAIM_ENTRY_TOKENS * 4) * per_input_token
    assert bound(pair) > fixed


def test_the_reply_bound_is_the_setting_or_room_for_max_claims() -> None:
    config = cascade({"llm_judge": {"max_claims": 10}})
    assert reply_token_bound(config.llm_judge) == 64 * 10 + 64
    config = cascade({"llm_judge": {"max_output_tokens": 500}})
    assert reply_token_bound(config.llm_judge) == 500


# --- settings --------------------------------------------------------------------------------

LLM = {"endpoint": "http://vllm:8000/v1", "model": "judge-model"}
PRICES = {"input_usd_per_1m_tokens": 0.15, "output_usd_per_1m_tokens": 0.6}


def cascade(extra: dict[str, Any] | None = None) -> FaithfulnessConfig:
    settings: dict[str, Any] = {
        "judge": "cascade",
        "llm_judge": LLM | PRICES,
        "cascade": {"usd_per_hour": 2.0},
    }
    for key, value in (extra or {}).items():
        settings[key] = settings.get(key, {}) | value if isinstance(value, dict) else value
    return FaithfulnessConfig.model_validate(settings)


@pytest.mark.parametrize(
    ("faithfulness", "problem"),
    [
        (
            {"judge": "cascade", "cascade": {"usd_per_hour": 1}},
            "detectors.faithfulness.llm_judge: Value error, endpoint is required when judge "
            "is cascade",
        ),
        (
            {"judge": "cascade", "llm_judge": LLM | PRICES},
            "detectors.faithfulness.cascade: Value error, usd_per_hour is required when judge "
            "is cascade",
        ),
        (
            {"judge": "cascade", "llm_judge": LLM, "cascade": {"usd_per_hour": 1}},
            "detectors.faithfulness.cascade: Value error, a budget in USD needs the LLM "
            "judge's prices, and genai-prices has none for judge-model",
        ),
        (
            {
                "judge": "cascade",
                "llm_judge": LLM | PRICES,
                "cascade": {"usd_per_hour": 1, "band_low": 0.6, "band_high": 0.4},
            },
            "detectors.faithfulness.cascade.band_high: Value error, band_high (0.4) is below "
            "band_low (0.6)",
        ),
        (
            {
                "judge": "cascade",
                "llm_judge": LLM | PRICES,
                "cascade": {"usd_per_hour": 1, "band_low": 0.6, "band_high": 0.9},
            },
            "detectors.faithfulness.cascade: Value error, the band [0.6, 0.9] must hold the "
            "threshold (0.5)",
        ),
        (
            {"cascade": {"usd_per_hour": 0}},
            "detectors.faithfulness.cascade.usd_per_hour: Input should be greater than 0",
        ),
        (
            {"cascade": {"band_low": 1.5}},
            "detectors.faithfulness.cascade.band_low: Input should be less than or equal to 1",
        ),
    ],
    ids=[
        "no-endpoint",
        "no-budget",
        "no-price",
        "band-reversed",
        "threshold-outside-band",
        "zero-budget",
        "band-past-1",
    ],
)
def test_cascade_settings_are_checked_at_load_naming_the_key(
    tmp_path: Path, faithfulness: dict[str, Any], problem: str
) -> None:
    """A cascade that cannot keep its budget (none, or no price to count it in), or whose
    band is upside down or misses the threshold, stops at load with the key's path."""
    path = tmp_path / "rag-monitor.yaml"
    path.write_text(yaml.safe_dump({"detectors": {"faithfulness": faithfulness}}))
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert any(p.startswith(problem) for p in raised.value.problems), raised.value.problems


def test_a_model_genai_prices_knows_needs_no_configured_price() -> None:
    config = FaithfulnessConfig.model_validate(
        {
            "judge": "cascade",
            "llm_judge": {"endpoint": LLM["endpoint"], "model": "gpt-4o-mini"},
            "cascade": {"usd_per_hour": 1},
        }
    )
    assert config.cascade.usd_per_hour == 1


def test_a_cascade_names_both_tiers_and_its_band_and_sizes_its_batches() -> None:
    """The identity holds the first judge's and the LLM judge's identities and the band
    (another band: another judge); a batch is as large as the LLM's concurrency, so one
    batch's uncertain answers can fill it; the stall bound covers the LLM's retries."""
    config = cascade({"llm_judge": {"concurrency": 6}})
    hhem = judge_identity(config.model_copy(update={"judge": "hhem"}))
    llm = judge_identity(config.model_copy(update={"judge": "openai_compatible"}))
    assert judge_identity(config) == f"cascade/{hhem}+{llm}/b0.3-0.7"
    narrower = cascade({"cascade": {"band_low": 0.4, "band_high": 0.6}})
    assert judge_identity(narrower) != judge_identity(config)
    assert batch_size_for(config) == 6
    assert batch_size_for(cascade({"device": "cuda", "llm_judge": {"concurrency": 2}})) == 8
    assert stall_after_s(config) > STALL_S


def test_a_cascade_with_hhem_first_needs_its_model_and_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """models fetch fetches HHEM for a cascade whose first judge it is; without the hhem
    extra the sidecar stops before serving, naming the cascade's setting."""
    config = cascade()
    assert [need.setting for need in model_needs(config)][:1] == ["model"]
    monkeypatch.setattr("monitor.contract.extras.find_spec", lambda _: None)
    with pytest.raises(MissingExtraError, match=r"judge: cascade, cascade\.first: hhem"):
        require_extras(config)
