"""The review sampler: strata shares within binomial bounds, bounds, weekly reading."""

from __future__ import annotations

import math
import random
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from detectors.review.config import ReviewConfig
from detectors.review.metrics import ReviewMetrics
from detectors.review.sampler import (
    HOUR_S,
    WEEK_S,
    Action,
    AttachFeedback,
    AttachScore,
    Enqueue,
    ReviewSampler,
)
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Context, Feedback, JudgeScore, RagTrace
from tests.conftest import sample

N = 10_000
# A bound no test reaches: even its burst (BURST_S of it) holds every trace of a test.
UNBOUNDED = 10**9


class FakeClock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class Sink:
    """Collects the sampler's actions; refuses them while ``full``."""

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self.full = False

    def __call__(self, action: Action) -> bool:
        if self.full:
            return False
        self.actions.append(action)
        return True

    def queued(self, stratum: str) -> list[str]:
        return [
            a.item.trace_id
            for a in self.actions
            if isinstance(a, Enqueue) and a.item.strata == (stratum,)
        ]


def make(
    clock: FakeClock | None = None, **settings: Any
) -> tuple[ReviewSampler, Sink, SidecarRegistry]:
    unbounded = dict.fromkeys(("random", "low_faithfulness", "thumbs_down", "follow_up"), UNBOUNDED)
    config = ReviewConfig.model_validate(
        {
            "enabled": True,
            "random_rate": 0.0,
            "weekly_reading": 0,
            "max_per_hour": {**unbounded, **settings.pop("max_per_hour", {})},
            **settings,
        }
    )
    registry, sink = SidecarRegistry(), Sink()
    sampler = ReviewSampler(config, ReviewMetrics(registry), sink, clock or FakeClock())
    return sampler, sink, registry


def trace(index: int, session: str | None = None, query: str = "how do I reset it?") -> RagTrace:
    return RagTrace(
        trace_id=f"{index:032x}",
        time=datetime.fromtimestamp(1_700_000_000 + index, tz=UTC),
        source="otlp",
        session_id=session,
        tenant="acme",
        query=query,
        answer="Press the button.",
        contexts=(Context("doc-1", "c1", "Press the button for 5 s."),),
    )


def within_binomial(count: int, n: int, p: float, sigmas: float = 4.0) -> bool:
    mean, sd = n * p, math.sqrt(n * p * (1 - p))
    return abs(count - mean) <= sigmas * sd


def test_random_share_is_within_binomial_bounds_and_deterministic() -> None:
    """10,000 traces at 1.5%: the random stratum's count is within 4 sigma, the same twice."""
    picks = []
    for _ in range(2):
        sampler, sink, registry = make(random_rate=0.015)
        for i in range(N):
            sampler.observe(trace(i))
        picks.append(sink.queued("random"))
    assert within_binomial(len(picks[0]), N, 0.015), len(picks[0])
    assert picks[0] == picks[1]
    assert sample(registry, "rag_review_sampled_total", stratum="random") == len(picks[0])


def test_thumbs_down_is_oversampled_at_its_rate() -> None:
    """Of 2,000 thumbs-down traces half are queued (rate 0.5), within binomial bounds; other
    feedback queues nothing."""
    sampler, sink, _ = make(thumbs_down_rate=0.5)
    for i in range(N):
        sampler.observe(trace(i))
        kind = "thumbs_down" if i % 5 == 0 else "copy"
        sampler.observe_event(Feedback(f"{i:032x}", kind))  # type: ignore[arg-type]
    queued = sink.queued("thumbs_down")
    assert within_binomial(len(queued), N // 5, 0.5), len(queued)
    assert all(int(t, 16) % 5 == 0 for t in queued)


@pytest.mark.parametrize("rate", [1.0, 0.3], ids=["all", "share"])
def test_follow_up_queues_the_previous_answer_of_the_session(rate: float) -> None:
    """In 5,000 two-query sessions, those whose second query matches a pattern (any case)
    queue the first answer: all of them at rate 1, a binomial share at 0.3."""
    sampler, sink, _ = make(follow_up_rate=rate)
    rng = random.Random(7)
    expected = []
    for s in range(N // 2):
        first, second = 2 * s, 2 * s + 1
        sampler.observe(trace(first, session=f"s{s}"))
        follow = rng.random() < 0.2
        query = rng.choice(["ARE YOU SURE?", "but what about Linux"]) if follow else "thanks"
        sampler.observe(trace(second, session=f"s{s}", query=query))
        if follow:
            expected.append(f"{first:032x}")
    queued = sink.queued("follow_up")
    if rate == 1.0:
        assert queued == expected
    else:
        assert set(queued) <= set(expected)
        assert within_binomial(len(queued), len(expected), rate), (len(queued), len(expected))


def test_low_faithfulness_comes_from_judge_scores_under_their_threshold() -> None:
    """JudgeScore events under the threshold queue their trace (rate 0.5: a binomial share);
    scores at or over it do not."""
    sampler, sink, _ = make(low_faithfulness_rate=0.5)
    rng = random.Random(3)
    low = set()
    for i in range(N):
        sampler.observe(trace(i))
        score = rng.random()
        if score < 0.3:
            low.add(f"{i:032x}")
        sampler.observe_event(JudgeScore(f"{i:032x}", score, 0.3))
    queued = sink.queued("low_faithfulness")
    assert set(queued) <= low
    assert within_binomial(len(queued), len(low), 0.5), (len(queued), len(low))
    items = [a.item for a in sink.actions if isinstance(a, Enqueue)]
    assert all(item.hhem_score is not None and item.hhem_score < 0.3 for item in items)


def test_evidence_for_a_queued_item_is_attached() -> None:
    """A score and a feedback kind for an item already queued become attach actions."""
    sampler, sink, _ = make(random_rate=1.0)
    sampler.observe(trace(1))
    sampler.observe_event(JudgeScore(f"{1:032x}", 0.9, 0.5))
    sampler.observe_event(Feedback(f"{1:032x}", "regenerate"))
    assert sink.actions[1:] == [
        AttachScore(f"{1:032x}", 0.9, 0.5),
        AttachFeedback(f"{1:032x}", "regenerate"),
    ]


def test_traces_without_query_or_answer_are_no_candidates() -> None:
    """A trace with no answer (or no query) is never queued, whatever the evidence."""
    sampler, sink, registry = make(random_rate=1.0)
    bare = RagTrace(trace_id="ab", time=datetime.now(UTC), source="otlp", query="q")
    sampler.observe(bare)
    sampler.observe_event(Feedback("ab", "thumbs_down"))
    assert sink.actions == []
    assert (
        sample(registry, "rag_review_skipped_total", stratum="thumbs_down", reason="expired") == 1
    )


def test_each_stratum_bound_is_spent_evenly_over_the_hour() -> None:
    """At random_rate 1, max_per_hour 120 and a trace a second, each minute after the first
    five queues 2 (the first minute adds the saved burst: 5 minutes, 10), the last half
    hour as many as the first half's later minutes, and the rest are counted skipped."""
    clock = FakeClock()
    sampler, sink, registry = make(clock, random_rate=1.0, max_per_hour={"random": 120})
    minute_of: dict[str, int] = {}
    for i in range(int(HOUR_S)):
        clock.now = 1_000_000.0 + i
        minute_of[f"{i:032x}"] = i // 60
        sampler.observe(trace(i))
    per_minute = Counter(minute_of[tid] for tid in sink.queued("random"))
    assert 10 <= per_minute[0] <= 10 + 2 + 1
    assert all(1 <= per_minute[m] <= 3 for m in range(1, 60)), per_minute
    assert 59 <= sum(per_minute[m] for m in range(30, 60)) <= 61
    queued = len(sink.queued("random"))
    assert queued <= 120 + 10 + 1
    skipped = sample(registry, "rag_review_skipped_total", stratum="random", reason="max_per_hour")
    assert skipped == HOUR_S - queued


def test_a_zero_bound_queues_nothing_and_a_full_queue_is_counted() -> None:
    """max_per_hour 0 skips its stratum's every pick; a full worker queue is counted too."""
    clock = FakeClock()
    sampler, sink, registry = make(
        clock, random_rate=1.0, thumbs_down_rate=1.0, max_per_hour={"thumbs_down": 0}
    )
    sampler.observe(trace(1))
    sampler.observe_event(Feedback(f"{1:032x}", "thumbs_down"))
    assert (sink.queued("random"), sink.queued("thumbs_down")) == ([f"{1:032x}"], [])
    assert (
        sample(registry, "rag_review_skipped_total", stratum="thumbs_down", reason="max_per_hour")
        == 1
    )
    sink.full = True
    sampler.observe(trace(2))
    assert sample(registry, "rag_review_skipped_total", stratum="random", reason="queue_full") == 1


def test_evidence_after_the_buffer_forgot_the_trace_is_counted_expired() -> None:
    """With a buffer of 10 traces, thumbs-down for the first of 20 is counted expired."""
    sampler, sink, registry = make(buffer_size=10)
    for i in range(20):
        sampler.observe(trace(i))
    sampler.observe_event(Feedback(f"{0:032x}", "thumbs_down"))
    sampler.observe_event(Feedback(f"{19:032x}", "thumbs_down"))
    assert sink.queued("thumbs_down") == [f"{19:032x}"]
    assert (
        sample(registry, "rag_review_skipped_total", stratum="thumbs_down", reason="expired") == 1
    )


def test_weekly_reading_yields_50_a_week_spread_over_the_week() -> None:
    """Three simulated weeks of a trace every 3 minutes: exactly 50 weekly_reading items a
    week, 6 to 9 a day, none twice."""
    start = 2_000 * WEEK_S
    clock = FakeClock(start)
    sampler, sink, registry = make(clock, weekly_reading=50)
    index = 0
    while clock.now < start + 3 * WEEK_S:
        sampler.observe(trace(index))
        index += 1
        clock.now += 180.0
        if index % 20 == 0:
            sampler.tick()
    sampler.tick()
    when = {f"{i:032x}": start + i * 180.0 for i in range(index)}
    picks = sink.queued("weekly_reading")
    assert len(picks) == len(set(picks))
    weeks = Counter(int((when[t] - start) // WEEK_S) for t in picks)
    assert weeks == {0: 50, 1: 50, 2: 50}
    days = Counter(int((when[t] - start) // 86_400) for t in picks)
    assert all(6 <= days[d] <= 9 for d in range(21)), days
    assert sample(registry, "rag_review_sampled_total", stratum="weekly_reading") == 150
