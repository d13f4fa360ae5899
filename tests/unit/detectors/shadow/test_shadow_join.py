"""The pair join: TTL, bounds, duplicates, out-of-order halves and late signals."""

from __future__ import annotations

import orjson
import pytest

from detectors.shadow.join import PairJoin
from detectors.shadow.model import (
    PairHalf,
    PairOutcome,
    Signal,
    half_record,
    message_from_record,
    outcome_from_record,
    outcome_record,
    signal_record,
)


def half(pair: str, variant: str = "production", trace: str | None = None) -> PairHalf:
    return PairHalf(trace or f"{pair}-{variant}", pair, variant, time=0.0)


def join(ttl: float = 10.0, settle: float = 5.0, bound: int = 100) -> PairJoin:
    return PairJoin(pair_ttl_s=ttl, settle_s=settle, max_pending=bound, wall_clock=lambda: 1.0)


def summary(outcomes: list[PairOutcome]) -> list[tuple[str, str, str]]:
    return [(o.outcome, o.pair_id, o.variant) for o in outcomes]


@pytest.mark.parametrize(
    "first", ["production", "shadow"], ids=["production-first", "shadow-first"]
)
def test_halves_join_in_either_order_and_settle(first: str) -> None:
    """Both arrival orders make one pair, final settle_s after the twin arrived."""
    pairs = join()
    second = "shadow" if first == "production" else "production"
    assert pairs.add(half("p1", first), now=0.0) == []
    assert pairs.add(half("p1", second), now=3.0) == []
    assert pairs.expire(now=7.9) == []
    (outcome,) = pairs.expire(now=8.0)
    assert summary([outcome]) == [("joined", "p1", "shadow")]
    assert outcome.both() == (half("p1", "production"), half("p1", "shadow"))


def test_half_without_twin_times_out_after_the_ttl() -> None:
    """A half alone for pair_ttl_s is timed_out; its twin arriving later is a new wait."""
    pairs = join(ttl=10.0)
    pairs.add(half("p1"), now=0.0)
    assert pairs.expire(now=9.9) == []
    assert summary(pairs.expire(now=10.0)) == [("timed_out", "p1", "production")]
    assert pairs.waiting == 0


@pytest.mark.parametrize(
    ("second", "why"),
    [
        (half("p1", "production"), "same trace again"),
        (half("p1", "production", trace="other-trace"), "a second production half"),
    ],
    ids=["replayed-half", "same-side"],
)
def test_second_half_of_the_same_side_is_a_duplicate(second: PairHalf, why: str) -> None:
    """Only the other side joins a waiting half; the first half keeps waiting."""
    pairs = join()
    pairs.add(half("p1"), now=0.0)
    assert summary(pairs.add(second, now=1.0)) == [("duplicate", "p1", "production")], why
    assert pairs.waiting == 1


def test_half_of_a_joined_or_final_pair_is_a_duplicate() -> None:
    """A third half, while the pair settles and after it is final, joins nothing."""
    pairs = join(ttl=10.0, settle=1.0)
    pairs.add(half("p1"), now=0.0)
    pairs.add(half("p1", "shadow"), now=0.0)
    assert summary(pairs.add(half("p1", "canary"), now=0.5)) == [("duplicate", "p1", "canary")]
    assert [o.outcome for o in pairs.expire(now=1.0)] == ["joined"]
    assert summary(pairs.add(half("p1", "shadow"), now=2.0)) == [("duplicate", "p1", "shadow")]
    # Once the final pair id is forgotten (after the TTL), the id may be used again.
    pairs.expire(now=12.0)
    assert pairs.add(half("p1"), now=12.0) == []


def test_waiting_halves_are_bounded_oldest_evicted() -> None:
    """Beyond max_pending the oldest waiting half is evicted, and counted."""
    pairs = join(bound=2)
    assert pairs.add(half("p1"), now=0.0) == []
    assert pairs.add(half("p2"), now=1.0) == []
    assert summary(pairs.add(half("p3"), now=2.0)) == [("evicted", "p1", "production")]
    assert pairs.waiting == 2


def test_settling_pairs_are_bounded_oldest_final_early() -> None:
    """Beyond max_pending settling pairs, the oldest is final at once: only late signals lost."""
    pairs = join(bound=1)
    for pair in ("p1", "p2"):
        pairs.add(half(pair), now=0.0)
        outcomes = pairs.add(half(pair, "shadow"), now=0.0)
    assert summary(outcomes) == [("joined", "p1", "shadow")]
    assert pairs.settling == 1


def test_signals_attach_to_their_half_while_waiting_or_settling() -> None:
    """A judge score and a decision reach the half they name, before or after the join."""
    pairs = join()
    pairs.add(half("p1"), now=0.0)
    assert pairs.signal(Signal("p1", "p1-production", "faithfulness", 0.9)) == "attached"
    pairs.add(half("p1", "shadow"), now=1.0)
    assert pairs.signal(Signal("p1", "p1-shadow", "faithfulness", 0.4)) == "attached"
    assert pairs.signal(Signal("p1", "p1-shadow", "false_exclusion", 1.0)) == "attached"
    (outcome,) = pairs.expire(now=100.0)
    production, shadow = outcome.both()
    assert (production.faithfulness, shadow.faithfulness) == (0.9, 0.4)
    assert (production.excluded, shadow.excluded) == (None, True)


def test_signal_after_the_pair_is_final_is_late_and_unknown_pairs_are_unknown() -> None:
    """A signal for a final pair is late; for a pair never seen, unknown."""
    pairs = join(settle=0.0)
    pairs.add(half("p1"), now=0.0)
    pairs.add(half("p1", "shadow"), now=0.0)
    pairs.expire(now=0.0)
    assert pairs.signal(Signal("p1", "p1-shadow", "faithfulness", 0.5)) == "late"
    assert pairs.signal(Signal("p9", "p9-shadow", "faithfulness", 0.5)) == "unknown"


def test_drain_stops_waiting_halves_and_finalises_settling_pairs() -> None:
    """At shutdown nothing held is lost without an outcome."""
    pairs = join()
    pairs.add(half("p1"), now=0.0)
    pairs.add(half("p2"), now=0.0)
    pairs.add(half("p2", "shadow"), now=0.0)
    assert sorted(summary(pairs.drain(now=1.0))) == [
        ("joined", "p2", "shadow"),
        ("stopped", "p1", "production"),
    ]
    assert (pairs.waiting, pairs.settling) == (0, 0)


@pytest.mark.parametrize(
    "value",
    [
        b"[1, 2]",
        b'"text"',
        b'{"schema": "rag-shadow-half/1"}',
        b'{"schema": "rag-shadow-half/1", "trace_id": "a", "pair_id": "p", "variant": "x", '
        b'"time": "soon"}',
        b'{"schema": "rag-shadow-signal/1", "pair_id": "p", "trace_id": "a", "kind": "x", '
        b'"value": 1}',
        b'{"schema": "rag-shadow-half/1", "trace_id": "a", "pair_id": "p", "variant": "x", '
        b'"time": 1, "stages": [1, 2]}',
        b'{"schema": "other"}',
    ],
    ids=["array", "string", "missing-fields", "bad-time", "bad-kind", "bad-stages", "schema"],
)
def test_malformed_topic_records_are_refused_with_the_counted_errors(value: bytes) -> None:
    """Whatever a topic holds, decoding raises only the errors the readers count as invalid."""
    with pytest.raises((ValueError, KeyError, TypeError)):
        message_from_record(orjson.loads(value))
    with pytest.raises((ValueError, KeyError, TypeError)):
        outcome_from_record(orjson.loads(value))


def test_records_round_trip() -> None:
    """A half, a signal and an outcome read back as what was written."""
    production = PairHalf("a", "p", "production", 1.0, stages={"generate": 0.5}, excluded=True)
    shadow = PairHalf("b", "p", "shadow", 1.0, retrieved=("d1",), faithfulness=0.25)
    outcome = PairOutcome("joined", "p", 2.0, production, shadow)
    assert outcome_from_record(orjson.loads(orjson.dumps(outcome_record(outcome)))) == outcome
    signal = Signal("p", "b", "false_exclusion", 1.0)
    assert message_from_record(signal_record(signal)) == signal
    assert message_from_record(half_record(shadow)) == shadow
