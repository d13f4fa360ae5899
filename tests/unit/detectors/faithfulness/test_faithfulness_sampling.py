"""The sampler: deterministic hash sampling, always-sampled kinds, rate cap, bounded queue."""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime

import pytest

from detectors.faithfulness.detector import without_query_vector
from monitor.contract.sampler import Sampled, Sampler, TokenBucket, trace_fraction
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Feedback, Label, RagTrace
from tests.conftest import sample


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def trace(trace_id: str, probe_id: str | None = None) -> RagTrace:
    return RagTrace(trace_id=trace_id, time=datetime.now(UTC), source="otlp", probe_id=probe_id)


def sampler(
    registry: SidecarRegistry, clock: FakeClock | None = None, **overrides: object
) -> Sampler:
    settings: dict[str, object] = {
        "sample_rate": 0.1,
        "always_sample": ["probe", "thumbs_down"],
        "max_per_second": 1e9,
        "queue_size": 100_000,
    }
    settings.update(overrides)
    if clock is not None:
        settings["clock"] = clock
    return Sampler("faithfulness", registry, **settings)  # type: ignore[arg-type]


def queued(registry: SidecarRegistry) -> float:
    return sample(registry, "rag_monitor_samples_total", detector="faithfulness", outcome="queued")


def dropped(registry: SidecarRegistry) -> float:
    return sample(registry, "rag_monitor_samples_total", detector="faithfulness", outcome="dropped")


@pytest.mark.parametrize("rate", [0.02, 0.1, 0.5], ids=["2%", "10%", "50%"])
def test_sampled_share_is_within_binomial_bounds(rate: float) -> None:
    """Of 20,000 random trace ids the share taken is within 4 sd of sample_rate."""
    registry = SidecarRegistry()
    s = sampler(registry, sample_rate=rate, always_sample=[])
    n = 20_000
    taken = sum(s.offer(trace(f"{i * 2654435761 % 2**64:032x}")) for i in range(n))
    sd = math.sqrt(n * rate * (1 - rate))
    assert abs(taken - n * rate) < 4 * sd
    assert queued(registry) == taken


def test_replicas_choose_the_same_traces() -> None:
    """Two samplers (two replicas, or a replay) take exactly the same trace ids."""
    ids = [f"{i:032x}" for i in range(2000)]
    first = [sampler(SidecarRegistry()).offer(trace(t)) for t in ids]
    second_sampler = sampler(SidecarRegistry())
    second = [second_sampler.offer(trace(t)) for t in ids]
    assert first == second
    assert all(0 <= trace_fraction(t) < 1 for t in ids)
    assert trace_fraction("ABCDEF") == trace_fraction("abcdef")


def test_probes_are_always_taken_even_when_the_rate_budget_is_spent() -> None:
    """A probe is queued whatever its hash and however empty the token bucket."""
    registry = SidecarRegistry()
    s = sampler(registry, FakeClock(), sample_rate=1e-9, max_per_second=0.001)
    assert all(s.offer(trace(f"{i:032x}", probe_id=f"q{i}")) for i in range(50))
    assert queued(registry) == 50
    assert {item.reason for item in list(s.queue.queue)} == {"probe"}


def test_probes_follow_the_hash_when_not_always_sampled() -> None:
    """Without 'probe' in always_sample, probes are sampled like any trace."""
    s = sampler(SidecarRegistry(), sample_rate=1e-9, always_sample=["thumbs_down"])
    assert not any(s.offer(trace(f"{i:032x}", probe_id="q1")) for i in range(50))


def test_thumbs_down_within_the_wait_takes_the_held_trace() -> None:
    """A trace not sampled is queued when thumbs-down arrives within the wait, not after."""
    clock = FakeClock()
    s = sampler(SidecarRegistry(), clock, sample_rate=1e-9, thumbs_down_wait_s=60)
    assert not s.offer(trace("a" * 32))
    assert not s.offer(trace("b" * 32))
    clock.now += 30
    assert s.observe_event(Feedback(trace_id="a" * 32, kind="thumbs_down"))
    assert not s.observe_event(Feedback(trace_id="b" * 32, kind="thumbs_up"))
    assert not s.observe_event(Label(gold_doc_ids=("d1",), trace_id="b" * 32))
    clock.now += 31
    assert not s.observe_event(Feedback(trace_id="b" * 32, kind="thumbs_down"))
    assert [item.trace.trace_id for item in list(s.queue.queue)] == ["a" * 32]
    assert s.queue.queue[0].reason == "thumbs_down"


def test_thumbs_down_before_its_trace_takes_the_trace_on_arrival() -> None:
    """Feedback that overtakes its trace (span assembly still waiting) is remembered."""
    clock = FakeClock()
    s = sampler(SidecarRegistry(), clock, sample_rate=1e-9, thumbs_down_wait_s=60)
    s.observe_event(Feedback(trace_id="c" * 32, kind="thumbs_down"))
    clock.now += 10
    assert s.offer(trace("c" * 32))
    assert not s.offer(trace("c" * 32))  # remembered once, not forever


def test_held_traces_are_bounded() -> None:
    """Traces held for possible feedback never exceed max_awaiting; the oldest go first."""
    s = sampler(SidecarRegistry(), FakeClock(), sample_rate=1e-9, max_awaiting=100)
    for i in range(1000):
        s.offer(trace(f"{i:032x}"))
    assert s.awaiting == 100
    assert not s.observe_event(Feedback(trace_id=f"{0:032x}", kind="thumbs_down"))
    assert s.observe_event(Feedback(trace_id=f"{999:032x}", kind="thumbs_down"))


def test_max_per_second_caps_sampled_traces_and_counts_the_rest() -> None:
    """With every trace sampled, 5/s lets a burst of 5 through, then 5 per second."""
    clock = FakeClock()
    registry = SidecarRegistry()
    s = sampler(registry, clock, sample_rate=1.0, max_per_second=5.0)
    assert sum(s.offer(trace(f"{i:032x}")) for i in range(100)) == 5
    clock.now += 1.0
    assert sum(s.offer(trace(f"{i + 100:032x}")) for i in range(100)) == 5
    assert (queued(registry), dropped(registry)) == (10, 190)


def test_token_bucket_refills_at_its_rate_up_to_its_burst() -> None:
    """Unused seconds save tokens only up to the burst size."""
    clock = FakeClock()
    bucket = TokenBucket(rate=2.0, burst=3.0, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 100
    assert sum(bucket.take() for _ in range(10)) == 3


def test_a_full_queue_drops_and_counts_without_blocking() -> None:
    """Offering 10,000 traces to a queue of 8 returns at once: 8 queued, the rest dropped."""
    registry = SidecarRegistry()
    s = sampler(registry, sample_rate=1.0, queue_size=8)
    started = time.perf_counter()
    results = [s.offer(trace(f"{i:032x}")) for i in range(10_000)]
    assert time.perf_counter() - started < 2.0
    assert sum(results) == 8
    assert (queued(registry), dropped(registry)) == (8, 9992)


def test_samplers_of_one_registry_share_the_counter() -> None:
    """Two expensive detectors on one registry count under their own detector label."""
    registry = SidecarRegistry()
    Sampler(
        "faithfulness", registry, sample_rate=1.0, always_sample=[], max_per_second=10, queue_size=1
    )
    other = Sampler(
        "drift", registry, sample_rate=1.0, always_sample=[], max_per_second=10, queue_size=1
    )
    other.offer(trace("d" * 32))
    assert sample(registry, "rag_monitor_samples_total", detector="drift", outcome="queued") == 1


def offer_hourly(s: Sampler, clock: FakeClock, per_hour: int, hours: int, start: int = 0) -> int:
    """Offer ``per_hour`` distinct traces an hour, evenly spaced; the number taken."""
    taken = 0
    for i in range(per_hour * hours):
        clock.now += 3600 / per_hour
        taken += s.offer(trace(f"{(start + i) * 2654435761 % 2**64:032x}"))
    return taken


def effective_rate(registry: SidecarRegistry) -> float:
    return sample(registry, "rag_monitor_effective_sample_rate", detector="faithfulness")


def test_floor_raises_the_rate_at_low_traffic() -> None:
    """At 600 traces an hour a 2% rate takes 12; the floor of 120 an hour raises the rate to
    20% (exported), and the second hour takes 120 within binomial bounds."""
    registry, clock = SidecarRegistry(), FakeClock()
    s = sampler(registry, clock, sample_rate=0.02, always_sample=[], min_per_hour=120.0)
    offer_hourly(s, clock, per_hour=600, hours=1)  # the first hour fills the estimate
    taken = offer_hourly(s, clock, per_hour=600, hours=1, start=600)
    assert effective_rate(registry) == pytest.approx(0.2, rel=0.01)
    assert abs(taken - 120) < 4 * math.sqrt(600 * 0.2 * 0.8)


def test_floor_leaves_the_rate_at_high_traffic() -> None:
    """At 36,000 traces an hour 2% already takes 720 > 120: the rate stays 2%."""
    registry, clock = SidecarRegistry(), FakeClock()
    s = sampler(registry, clock, sample_rate=0.02, always_sample=[], min_per_hour=120.0)
    taken = offer_hourly(s, clock, per_hour=36_000, hours=1)
    assert effective_rate(registry) == 0.02
    assert abs(taken - 720) < 4 * math.sqrt(36_000 * 0.02 * 0.98)


def test_floor_stays_within_the_scorers_capacity() -> None:
    """A floor above max_per_second is cut by the token bucket: the rest is counted dropped."""
    registry, clock = SidecarRegistry(), FakeClock()
    s = sampler(
        registry, clock, sample_rate=0.02, always_sample=[], min_per_hour=1e6, max_per_second=0.01
    )
    taken = offer_hourly(s, clock, per_hour=3600, hours=1)
    assert effective_rate(registry) == 1.0
    assert taken == queued(registry) <= 0.01 * 3600 + 1
    assert dropped(registry) == 3600 - taken


def test_no_floor_keeps_the_configured_rate() -> None:
    """Without min_per_hour the exported rate is sample_rate whatever the traffic."""
    registry, clock = SidecarRegistry(), FakeClock()
    s = sampler(registry, clock, sample_rate=0.02, always_sample=[])
    offer_hourly(s, clock, per_hour=60, hours=1)
    assert effective_rate(registry) == 0.02


def test_traces_held_for_feedback_are_held_in_the_given_form() -> None:
    """An unsampled trace waits for thumbs-down without its query vector (the faithfulness
    detector's held form); a thumbs-down then queues that form, the rest intact."""
    clock = FakeClock()
    s = sampler(SidecarRegistry(), clock, sample_rate=1e-9, held_form=without_query_vector)
    held = RagTrace(
        trace_id="d" * 32,
        time=datetime.now(UTC),
        source="otlp",
        query="q",
        answer="a",
        query_embedding=tuple(float(i) for i in range(1536)),
    )
    assert not s.offer(held)
    assert s.observe_event(Feedback(trace_id="d" * 32, kind="thumbs_down"))
    queued = s.queue.queue[0].trace
    assert queued.query_embedding is None
    assert (queued.trace_id, queued.query, queued.answer) == ("d" * 32, "q", "a")


def settled(registry: SidecarRegistry) -> float:
    return sample(registry, "rag_monitor_samples_total", detector="faithfulness", outcome="settled")


def test_settled_traces_are_counted_neither_queued_nor_charged_to_the_cap() -> None:
    """Traces the detector settles inline (ids starting with 0 here) are counted settled and
    never queued; they spend no token, so the scorable ones still get the whole cap, and a
    held trace taken by thumbs-down is settled the same way."""
    clock = FakeClock()
    registry = SidecarRegistry()
    seen: list[str] = []

    def settle(taken: Sampled) -> bool:
        seen.append(taken.reason)
        return taken.trace.trace_id.startswith("0")

    s = sampler(registry, clock, sample_rate=1.0, max_per_second=5.0, settle=settle)
    assert not any(s.offer(trace(f"0{i:031x}")) for i in range(100))
    assert sum(s.offer(trace(f"1{i:031x}")) for i in range(100)) == 5
    assert (settled(registry), queued(registry), dropped(registry)) == (100, 5, 95)
    assert all(item.trace.trace_id.startswith("1") for item in list(s.queue.queue))
    probe = sampler(SidecarRegistry(), clock, sample_rate=1e-9, settle=settle)
    assert not probe.offer(trace("0" * 32, probe_id="q1"))
    assert not probe.offer(trace("0" + "a" * 31))
    assert not probe.observe_event(Feedback(trace_id="0" + "a" * 31, kind="thumbs_down"))
    assert probe.queue.qsize() == 0
    assert seen[-2:] == ["probe", "thumbs_down"]
