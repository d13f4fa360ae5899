"""judge: cascade with a real first judge (an HHEM checkpoint built here, random weights:
its scores are placed in or out of the uncertain band by choosing the answers) and the
LLM judge against a fake OpenAI-compatible server on 127.0.0.1: only the band goes to
the LLM; at ten times the traffic its budget affords, the spend in every hour stays
within the budget, refused answers keep the first verdict and are counted; each tier's
verdicts are counted apart; the detector's scores carry the tiers."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from detectors.faithfulness import FaithfulnessDetector
from detectors.faithfulness.cascade_judge import CascadeJudge, load_cascade_judge
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.judge_choice import open_judge
from detectors.faithfulness.judge_contract import JudgePair, JudgeResult
from detectors.faithfulness.worker import ScoringWorker
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Context, RagTrace, TierVerdict
from tests.conftest import sample, wait_until
from tests.fake_openai import Script, Seen, fake_openai
from tests.hhem_checkpoint import build_checkpoint
from tests.integration.test_llm_judge import JudgeScores

pytestmark = pytest.mark.integration

PREMISE = "Refunds are possible within 30 days.\n\nShipping is free above 50 euros."
QUESTION = "what is the refund policy?"
BAND = (0.3, 0.7)
THRESHOLD = 0.5
PRICE = 1.0  # USD per 1M tokens, in and out
# The LLM's verdict on every answer: one claim of three supported.
CLAIMS = ["Refunds take some days.", "Shipping costs something.", "Staff are kind."]
VERDICTS = {CLAIMS[0]: True, CLAIMS[1]: False, CLAIMS[2]: False}
LLM_SHARE = 1 / 3
CANDIDATES = [f"Refunds take {i} days and shipping costs {i % 7} euros." for i in range(240)]
HOUR = 3600.0


class Clock:
    """Time the test moves: the budget's window and the rate limit read it, and the fake
    server moves it on by each reply's latency."""

    def __init__(self) -> None:
        self._now = 1000.0
        self._lock = threading.Lock()

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._now += seconds


@dataclass(frozen=True)
class Placed:
    """Candidate answers by where the first judge's score falls."""

    below: list[str]
    band: list[str]
    above: list[str]
    scores: dict[str, float] = field(repr=False)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # spread 4: scores fall on both sides of the band as well as in it.
    return build_checkpoint(tmp_path_factory.mktemp("hhem"), spread=4.0)[0]


@pytest.fixture(scope="module")
def placed(checkpoint: Path) -> Placed:
    """The HHEM checkpoint's own scores of the candidates, as the cascade's first judge
    will give them (same settings), sorted into below, in and above the band."""
    config = FaithfulnessConfig.model_validate(local_settings(checkpoint))
    hhem = open_judge(config, registry=None, on_stats=lambda _: None, stopping=threading.Event())
    results = hhem.score([JudgePair(PREMISE, a, QUESTION) for a in CANDIDATES])
    scores = {a: r.score for a, r in zip(CANDIDATES, results, strict=True) if r.score is not None}
    low, high = BAND
    found = Placed(
        [a for a, s in scores.items() if s < low],
        [a for a, s in scores.items() if low <= s <= high],
        [a for a, s in scores.items() if s > high],
        scores,
    )
    assert len(found.below) >= 2
    assert len(found.above) >= 2
    assert len(found.band) >= 8
    return found


def local_settings(checkpoint: Path) -> dict[str, Any]:
    # No score cache: a repeated answer is judged (and paid for) again, as new traffic is.
    # One torch thread: the tiny model gains nothing from more, and CI's cores are shared.
    return {"model": str(checkpoint), "precision": "fp32", "cache_size": 0, "threads": 1}


def cascade_config(endpoint: str, checkpoint: Path, **cascade: Any) -> FaithfulnessConfig:
    return FaithfulnessConfig.model_validate(
        {
            **local_settings(checkpoint),
            "judge": "cascade",
            "threshold": THRESHOLD,
            "sample_rate": 1.0,
            "max_per_second": 1000,
            "llm_judge": {
                "endpoint": endpoint,
                "model": "fake-judge",
                "timeout_s": 5,
                "max_retries": 0,
                "max_claims": 4,
                "max_output_tokens": 64,
                "input_usd_per_1m_tokens": PRICE,
                "output_usd_per_1m_tokens": PRICE,
            },
            "cascade": {"band_low": BAND[0], "band_high": BAND[1], **cascade},
        }
    )


def script(answers: list[str], **hooks: Any) -> Script:
    return Script({a: list(CLAIMS) for a in answers}, dict(VERDICTS), **hooks)


def opened(config: FaithfulnessConfig, registry: SidecarRegistry, clock: Clock) -> CascadeJudge:
    return load_cascade_judge(
        config,
        registry=registry,
        on_stats=lambda _: None,
        stopping=threading.Event(),
        open_first=open_judge,
        clock=clock,
    )


def pairs_of(answers: list[str]) -> list[JudgePair]:
    return [JudgePair(PREMISE, a, QUESTION) for a in answers]


def tier_count(registry: SidecarRegistry, **labels: str) -> float:
    return sample(registry, "rag_judge_tier_verdicts_total", **labels)


def escalations(registry: SidecarRegistry, outcome: str) -> float:
    return sample(registry, "rag_judge_escalations_total", outcome=outcome)


def test_only_the_uncertain_band_goes_to_the_llm(checkpoint: Path, placed: Placed) -> None:
    """A batch of answers below, in and above the band, with budget and rate to spare: each
    answer in the band takes the LLM's two requests and gets its score, with both tiers;
    the others are never sent and keep the first judge's score, with the first tier alone.
    Each tier's verdicts are counted under its own judge."""
    band, out = placed.band[:4], placed.below[:2] + placed.above[:2]
    answers = [a for pair in zip(band, out, strict=True) for a in pair]  # interleaved
    registry = SidecarRegistry()
    with fake_openai(script(answers)) as server:
        config = cascade_config(server.endpoint, checkpoint, usd_per_hour=100.0, max_per_second=100)
        judge = opened(config, registry, Clock())
        try:
            results = judge.score(pairs_of(answers))
        finally:
            judge.close()
        requests = {a: len(server.requests_for(a)) for a in answers}
        total = len(server.seen)
    first, second = judge.first.name, judge.second.name
    for answer, result in zip(answers, results, strict=True):
        first_score = placed.scores[answer]
        assert result.tiers[0].judge == first
        assert result.tiers[0].score == pytest.approx(first_score, abs=1e-6)
        if answer in band:
            assert requests[answer] == 1
            assert result.outcome == "scored"
            assert result.score == pytest.approx(LLM_SHARE)
            assert result.tiers[0].escalated
            assert result.tiers[1:] == (TierVerdict(second, result.score, False),)
        else:
            assert requests[answer] == 0
            assert (result.outcome, result.score) == ("scored", result.tiers[0].score)
            assert len(result.tiers) == 1
            assert not result.tiers[0].escalated
    assert total == 2 * len(band)  # extraction and verification, nothing else
    assert escalations(registry, "sent") == len(band)
    supported = sum(placed.scores[a] >= THRESHOLD for a in answers)
    assert tier_count(registry, judge=first, tier="first", verdict="supported") == supported
    assert tier_count(registry, judge=first, tier="first") == len(answers)
    assert tier_count(registry, judge=second, tier="second", verdict="unsupported") == len(band)
    assert tier_count(registry, judge=second, tier="second") == len(band)
    assert judge.name.startswith("cascade/")
    assert first in judge.name
    assert second in judge.name


@dataclass
class SpendRecord:
    """Each 200 reply the fake server sent: the clock's time and the USD its usage costs."""

    clock: Clock
    latency_s: float
    charges: list[tuple[float, float]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @staticmethod
    def usage(seen: Seen, text: str) -> dict[str, int]:
        # About 4 bytes a token, as English text has with common tokenizers.
        prompt = len(json.dumps(seen.body)) // 4
        completion = len(text) // 4 + 1
        return {"prompt_tokens": prompt, "completion_tokens": completion}

    def on_reply(self, seen: Seen) -> None:
        assert seen.usage is not None
        self.clock.advance(self.latency_s)  # the model takes its time
        usd = (seen.usage["prompt_tokens"] + seen.usage["completion_tokens"]) * PRICE / 1e6
        with self.lock:
            self.charges.append((self.clock(), usd))

    def most_in_a_window(self, window_s: float) -> float:
        """The largest spend of any window [t, t + window_s) (each starting at a charge:
        the maximum is at one of them)."""
        charges = sorted(self.charges)
        most, end, total = 0.0, 0, 0.0
        for start, (at, _) in enumerate(charges):
            while end < len(charges) and charges[end][0] < at + window_s:
                total += charges[end][1]
                end += 1
            most = max(most, total)
            total -= charges[start][1]
        return most


BUDGET_USD = 0.01
HOURS = 3


def test_at_ten_times_the_budgets_traffic_the_spend_stays_within_it_in_every_hour(
    checkpoint: Path, placed: Placed
) -> None:
    """Three hours of uncertain answers, over ten times as many as the budget affords at
    their actual cost, against a budget of 0.01 USD an hour (the production window, on
    the test's clock; each reply takes 2 s): no window of an hour holds more spend than
    the budget, and the budget is used (over half of it in the busiest hour). Every
    answer either went to the LLM (its score, both tiers) or kept the first verdict
    (counted refused_budget); the rate never refused. The cost counter, the budget's
    charges and the server's replies agree."""
    clock = Clock()
    spend = SpendRecord(clock, latency_s=2.0)
    band = placed.band[:6]
    registry = SidecarRegistry()
    offered: list[tuple[str, JudgeResult]] = []
    with fake_openai(script(band, usage=spend.usage, on_reply=spend.on_reply)) as server:
        config = cascade_config(
            server.endpoint, checkpoint, usd_per_hour=BUDGET_USD, max_per_second=100
        )
        judge = opened(config, registry, clock)
        started = clock()
        try:
            while clock() - started < HOURS * HOUR:
                offered += zip(band, judge.score(pairs_of(band)), strict=True)
                clock.advance(90.0)  # 6 uncertain answers every 90 s: 240 an hour
        finally:
            judge.close()
        elapsed_h = (clock() - started) / HOUR
        extractions = sum(s.schema_name == "claims" for s in server.seen)
    sent = [r for _, r in offered if len(r.tiers) == 2]
    refused = [r for _, r in offered if len(r.tiers) == 1]
    pair_cost = sum(usd for _, usd in spend.charges) / len(sent)
    affordable_per_hour = BUDGET_USD / pair_cost
    assert len(offered) / elapsed_h >= 10 * affordable_per_hour
    busiest = spend.most_in_a_window(HOUR)
    print(
        f"busiest hour {busiest:.6f} USD of {BUDGET_USD} ({busiest / BUDGET_USD:.1%}); "
        f"{len(offered) / elapsed_h:.0f} uncertain answers an hour offered, "
        f"{affordable_per_hour:.1f} affordable; {len(sent)} sent, {len(refused)} refused"
    )
    assert busiest <= BUDGET_USD
    assert busiest >= 0.5 * BUDGET_USD
    # Each answer: sent and scored by the LLM, or refused with the first judge's verdict.
    assert len(sent) + len(refused) == len(offered)
    assert all(r.score == pytest.approx(LLM_SHARE) for r in sent)
    for result in refused:
        assert result.tiers[0].escalated
        assert (result.outcome, result.score) == ("scored", result.tiers[0].score)
    assert escalations(registry, "sent") == len(sent) == extractions
    assert escalations(registry, "refused_budget") == len(refused) > 0
    assert escalations(registry, "refused_rate") == 0
    # The budget charged what the cost counter counted, which is what the replies cost.
    counted = sample(registry, "rag_judge_cost_usd_total", judge=judge.second.name)
    assert counted == pytest.approx(sum(usd for _, usd in spend.charges), rel=1e-9)
    assert judge.budget.charged == pytest.approx(counted, rel=1e-12)
    # Tiers apart: the first judged every answer, the second the ones sent.
    first, second = judge.first.name, judge.second.name
    assert tier_count(registry, judge=first, tier="first") == len(offered)
    first_supported = sum(r.tiers[0].score >= THRESHOLD for _, r in offered)  # type: ignore[operator]
    assert tier_count(registry, judge=first, verdict="supported") == first_supported
    assert tier_count(registry, judge=second, tier="second", verdict="unsupported") == len(sent)


def test_the_rate_limit_refuses_past_its_rate_and_the_refused_keep_the_first_verdict(
    checkpoint: Path, placed: Placed
) -> None:
    """max_per_second 1, budget to spare: of four uncertain answers at once one is sent,
    three are refused_rate with the first verdict; a second later one more is sent."""
    clock = Clock()
    band = placed.band[:4]
    registry = SidecarRegistry()
    with fake_openai(script(band)) as server:
        config = cascade_config(server.endpoint, checkpoint, usd_per_hour=100.0, max_per_second=1)
        judge = opened(config, registry, clock)
        try:
            first_batch = judge.score(pairs_of(band))
            clock.advance(1.0)
            second_batch = judge.score(pairs_of(band))
        finally:
            judge.close()
        extractions = sum(s.schema_name == "claims" for s in server.seen)
    for batch in (first_batch, second_batch):
        assert [len(r.tiers) for r in batch] == [2, 1, 1, 1]
        for result in batch[1:]:
            assert result.score == result.tiers[0].score
    assert extractions == 2
    assert escalations(registry, "sent") == 2
    assert escalations(registry, "refused_rate") == 6
    assert escalations(registry, "refused_budget") == 0


def test_the_detector_records_the_final_verdict_with_its_tiers(
    checkpoint: Path, placed: Placed
) -> None:
    """judge: cascade in the sidecar's detector: each sampled answer's JudgeScore is the
    cascade's final score, names the cascade, and carries its tiers; the score histogram
    holds the final scores."""
    answers = [placed.band[0], placed.above[0], placed.band[1]]
    registry, scores = SidecarRegistry(), JudgeScores()
    with fake_openai(script(answers)) as server:
        config = cascade_config(server.endpoint, checkpoint, usd_per_hour=100.0, max_per_second=100)
        detector = FaithfulnessDetector(config, registry, emit=scores)
        detector.start()
        try:
            worker = detector.worker
            assert isinstance(worker, ScoringWorker)
            wait_until(lambda: worker.state == "ready")
            for index, answer in enumerate(answers):
                detector.observe(trace(index, answer))
            wait_until(lambda: len(scores.seen) == len(answers), 30)
        finally:
            detector.shutdown()
    by_answer = {answers[int(s.trace_id, 16)]: s for s in scores.seen}
    expected = {a: LLM_SHARE if a in placed.band else placed.scores[a] for a in answers}
    for answer, score in by_answer.items():
        assert score.judge == detector.judge
        assert score.judge.startswith("cascade/")
        assert score.score == pytest.approx(expected[answer], abs=1e-6)
        assert [t.escalated for t in score.tiers][:1] == [answer in placed.band]
        assert len(score.tiers) == (2 if answer in placed.band else 1)
    total = sum(expected.values())
    assert sample(registry, "rag_faithfulness_score_sum") == pytest.approx(total, abs=1e-5)


def trace(index: int, answer: str) -> RagTrace:
    return RagTrace(
        trace_id=f"{index:032x}",
        time=datetime.now(UTC),
        source="kafka",
        answer=answer,
        query=QUESTION,
        contexts=(Context("d1", text=PREMISE),),
    )


def test_an_endpoint_that_ignores_max_tokens_raises_later_bounds(
    checkpoint: Path, placed: Placed
) -> None:
    """A server that reports 2,000 output tokens a reply (past max_tokens 64): the batch
    costs more than its bounds; one warning says so, and later answers are reserved at
    the bound times the worst ratio seen, so the budget goes on holding."""
    band = placed.band[:2]
    registry = SidecarRegistry()
    with fake_openai(
        script(band, usage=lambda *_: {"prompt_tokens": 100, "completion_tokens": 2000})
    ) as server:
        config = cascade_config(server.endpoint, checkpoint, usd_per_hour=100.0, max_per_second=100)
        judge = opened(config, registry, Clock())
        try:
            with capture_logs() as logs:
                judge.score(pairs_of(band))
        finally:
            judge.close()
    bounds = sum(judge.cost_bound(pair) for pair in pairs_of(band))
    actual = 4 * 2100 * PRICE / 1e6
    assert actual > bounds
    assert judge.bound_factor == pytest.approx(actual / bounds)
    [warning] = [e for e in logs if e["event"] == "faithfulness_cascade_cost_over_bound"]
    assert warning["ratio"] == pytest.approx(actual / bounds, abs=1e-3)


def test_a_token_classifier_first_passes_its_spans_on_with_its_verdict(
    tmp_path: Path,
) -> None:
    """cascade.first: token_classifier (a LettuceDetect-shaped checkpoint built here): the
    band is the whole range, the rate admits one answer of three. The one sent gets the
    LLM's score and no spans; the two refused keep the token judge's score and its spans,
    exactly as the token judge alone gives them."""
    pytest.importorskip("tokenizers")
    from tests.token_checkpoint import build_checkpoint as build_token_checkpoint

    directory = build_token_checkpoint(tmp_path / "token")
    answers = [
        "Refunds are possible within 30 days.",
        "The parcel left the warehouse on Tuesday.",
        "Shipping costs five dollars.",
    ]
    token_settings = {"token_classifier": {"model": str(directory)}, "threads": 1}
    alone = open_judge(
        FaithfulnessConfig.model_validate({**token_settings, "judge": "token_classifier"}),
        registry=None,
        on_stats=lambda _: None,
        stopping=threading.Event(),
    )
    try:
        expected = alone.score(pairs_of(answers))
    finally:
        alone.close()
    registry = SidecarRegistry()
    with fake_openai(script(answers)) as server:
        config = FaithfulnessConfig.model_validate(
            cascade_config(
                server.endpoint,
                tmp_path,
                usd_per_hour=100.0,
                max_per_second=1,
                first="token_classifier",
                band_low=0.0,
                band_high=1.0,
            ).model_dump()
            | token_settings
        )
        judge = opened(config, registry, Clock())
        try:
            results = judge.score(pairs_of(answers))
        finally:
            judge.close()
    assert judge.first.name == alone.name
    assert any(r.spans for r in expected)  # the tiny model flags something
    sent, *refused = results
    assert (sent.score, sent.spans) == (pytest.approx(LLM_SHARE), ())
    assert sent.tiers[0] == TierVerdict(alone.name, expected[0].score, True)
    for result, own in zip(refused, expected[1:], strict=True):
        assert (result.score, result.spans) == (own.score, own.spans)
        assert result.tiers == (TierVerdict(alone.name, own.score, True),)
