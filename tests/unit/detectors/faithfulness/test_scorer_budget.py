"""What a scorer keeps and sheds (the per-service floor, duplicates) and the records that
travel between sidecars and scorers."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import orjson
import pytest

from detectors.faithfulness.judge_contract import JudgePair, JudgeResult
from detectors.faithfulness.judge_identity import judge_identity
from detectors.faithfulness.remote import pair_record, stratum_of, verdict_from_record
from detectors.faithfulness.scorer import Pair, Scorer
from detectors.faithfulness.scorer_budget import FloorBudget, SeenTraces
from monitor.contract.config import Config
from monitor.contract.sampler import Sampled, trace_fraction
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import Slicer
from monitor.contract.trace import Context, JudgeScore, RagTrace, UnscoredAnswer
from tests.conftest import sample


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def trace(trace_id: str, **fields: Any) -> RagTrace:
    return RagTrace(trace_id=trace_id, time=datetime.now(UTC), source="kafka", **fields)


def judged_per_minute(
    budget: FloorBudget, clock: Clock, minutes: int, per_second: dict[str, float]
) -> dict[str, list[int]]:
    """Pairs of one service judged in each minute, by stratum, with each stratum's pairs
    arriving evenly at its rate a second."""
    arrivals = sorted(
        (n / rate, stratum)
        for stratum, rate in per_second.items()
        for n in range(int(minutes * 60 * rate))
    )
    judged = {stratum: [0] * minutes for stratum in per_second}
    start = clock.now
    for at, stratum in arrivals:
        clock.now = start + at
        if budget.decide("checkout", stratum) == "judge":
            judged[stratum][int(at // 60)] += 1
    return judged


def test_floor_candidates_are_kept_at_the_floors_rate_all_hour_not_at_its_start() -> None:
    """A floor of 7,200 an hour at 2 of 4 partitions is 1/s for this scorer: candidates at
    4/s for an hour are kept 60 a minute in every minute after the first, which adds the
    saved burst (60 s of floor) and no more; the last half hour has its half."""
    clock = Clock()
    budget = FloorBudget(7200, 60, max_per_second=100, clock=clock)
    budget.set_share(2, 4)
    floor = judged_per_minute(budget, clock, 60, {"floor": 4.0})["floor"]
    assert 60 <= floor[0] <= 60 + 60 + 1
    assert all(59 <= n <= 61 for n in floor[1:]), floor
    assert 1770 <= sum(floor[30:]) <= 1830


def test_the_burst_saved_over_a_quiet_spell_is_bounded() -> None:
    """After ten quiet minutes a flood of 1,000 floor candidates keeps one burst (60 s of the
    scorer's 1/s), not ten minutes of floor; a service first seen starts with one burst too,
    and a smaller share cuts what was saved to its own burst."""
    clock = Clock()
    budget = FloorBudget(7200, 60, max_per_second=100, clock=clock)
    budget.set_share(2, 4)
    decisions = [budget.decide("checkout", "floor") for _ in range(1000)]
    assert decisions.count("judge") == 60
    clock.now += 600
    decisions = [budget.decide("checkout", "floor") for _ in range(1000)]
    assert decisions.count("judge") == 60
    clock.now += 600
    budget.set_share(1, 4)
    assert [budget.decide("checkout", "floor") for _ in range(1000)].count("judge") == 30
    assert [budget.decide("search", "floor") for _ in range(1000)].count("judge") == 30


@pytest.mark.parametrize(
    ("random_per_s", "floor_per_minute"),
    [(2.0, 0), (0.5, 30)],
    ids=["random-above-floor", "random-below-floor"],
)
def test_judged_pairs_of_any_stratum_count_toward_the_floor(
    random_per_s: float, floor_per_minute: int
) -> None:
    """Against this scorer's floor of 1/s, random pairs at 2/s meet it alone: after the
    first minute every floor candidate (4/s) is shed and every random pair judged; random
    at 0.5/s leaves the other 0.5/s to the candidates."""
    clock = Clock()
    budget = FloorBudget(7200, 60, max_per_second=100, clock=clock)
    budget.set_share(2, 4)
    judged = judged_per_minute(budget, clock, 60, {"floor": 4.0, "random": random_per_s})
    assert judged["random"] == [int(60 * random_per_s)] * 60
    assert all(abs(n - floor_per_minute) <= 1 for n in judged["floor"][1:]), judged["floor"]


@pytest.mark.parametrize("stratum", ["thumbs_down", "probe"], ids=["thumbs_down", "probe"])
def test_always_sampled_pairs_are_judged_past_the_floor_and_the_rate(stratum: str) -> None:
    """Thumbs-down and probe pairs are judged when the floor is met and the bucket empty."""
    budget = FloorBudget(0, 60, max_per_second=1, clock=Clock())
    assert budget.decide("checkout", "random") == "judge"
    assert budget.decide("checkout", "random") == "capacity"
    assert budget.decide("checkout", "floor") == "floor_met"
    assert budget.decide("checkout", stratum) == "judge"


def test_seen_traces_are_bounded_and_report_repeats() -> None:
    """A trace id seen again is a repeat until it falls out of the bound."""
    seen = SeenTraces(2)
    assert [seen.add(t) for t in ("a", "b", "a", "c", "b")] == [True, True, False, True, True]
    assert ["a" in seen, "b" in seen, "c" in seen] == [False, True, True]


@pytest.mark.parametrize(
    ("reason", "fraction_below", "stratum"),
    [("thumbs_down", False, "thumbs_down"), ("rate", True, "random"), ("rate", False, "floor")],
    ids=["always", "under-sample-rate", "raised-by-floor"],
)
def test_stratum_says_why_the_sampler_took_the_trace(
    reason: str, fraction_below: bool, stratum: str
) -> None:
    """Under sample_rate by the hash: random; taken only at the raised rate: floor."""
    tid = "4bf92f3577b34da6a3ce929d0e0e4736"
    rate = trace_fraction(tid) + (1e-9 if fraction_below else -1e-9)
    assert stratum_of(Sampled(trace(tid), reason), rate) == stratum  # type: ignore[arg-type]


def test_a_pair_round_trips_and_bad_records_are_refused() -> None:
    """The published pair reads back as the scorer's Pair; a pair without text does not."""
    taken = trace(
        "t1",
        answer=" It left Monday. ",
        query="When?",
        contexts=(Context("d1", text="It left Monday."), Context("d2")),
        service_name="checkout",
        variant="candidate",
    )
    record = pair_record(Sampled(taken, "rate"), "random", Slicer())
    pair = Pair.from_record(orjson.dumps(record), Slicer())
    assert (pair.premise, pair.answer, pair.question) == (
        "It left Monday.",
        "It left Monday.",
        "When?",
    )
    assert (pair.service, pair.variant, pair.stratum) == ("checkout", "candidate", "random")
    with pytest.raises(ValueError, match="non-empty"):
        Pair.from_record(orjson.dumps({**record, "premise": ""}), Slicer())
    with pytest.raises(ValueError, match="outside"):
        verdict_from_record(
            orjson.dumps({"trace_id": "t", "score": 2, "threshold": 0.5, "judge": "hhem"})
        )


class FixedJudge:
    """A judge at the boundary of this unit: scores by answer length, records its batches."""

    name = "fixed"
    batch_size = 2

    def __init__(self) -> None:
        self.batches: list[list[str]] = []

    def score(self, pairs: list[JudgePair]) -> list[JudgeResult]:
        self.batches.append([p.answer for p in pairs])
        return [JudgeResult.scored(0.25) for _ in pairs]

    def close(self) -> None:
        pass


class Sent:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def send(self, topic: str, key: bytes, value: bytes) -> None:
        self.records.append(orjson.loads(value))


def test_a_poll_is_judged_length_sorted_once_per_trace_and_published() -> None:
    """Pairs are judged shortest first in the judge's batches, a repeat in the same poll is
    a duplicate, an invalid record is counted, and each score is published with its variant."""
    registry = SidecarRegistry()
    config = Config.model_validate({"detectors": {"faithfulness": {"judge_location": "kafka"}}})
    scorer = Scorer(config.detectors.faithfulness, config.collectors.kafka, registry)
    pairs = [{"trace_id": f"t{n}", "premise": "p", "answer": "a" * n, "question": None,
              "variant": "production", "service": "s", "stratum": "random"} for n in (3, 1, 2)]  # fmt: skip
    values = [orjson.dumps(p) for p in pairs] + [orjson.dumps(pairs[0]), b"{"]
    judge, sent = FixedJudge(), Sent()
    scorer.handle(judge, values, sent)  # type: ignore[arg-type]
    assert judge.batches == [["a", "aa"], ["aaa"]]
    assert [r["trace_id"] for r in sent.records] == ["t1", "t2", "t3"]
    assert sample(registry, "rag_judge_scorer_pairs_total", outcome="judged") == 3
    assert sample(registry, "rag_judge_scorer_pairs_total", outcome="duplicate") == 1
    assert sample(registry, "rag_judge_scorer_pairs_total", outcome="invalid") == 1
    assert sample(registry, "rag_faithfulness_below_threshold_total", variant="production") == 3


def test_a_pair_redelivered_before_its_score_was_flushed_is_sent_again_not_judged() -> None:
    """After a failed flush the poll comes back: its scores are re-sent from memory and the
    pairs counted as duplicates, never judged twice."""
    registry = SidecarRegistry()
    config = Config.model_validate({"detectors": {"faithfulness": {"judge_location": "kafka"}}})
    scorer = Scorer(config.detectors.faithfulness, config.collectors.kafka, registry)
    value = orjson.dumps({"trace_id": "t1", "premise": "p", "answer": "a", "question": None,
                          "variant": "production", "service": "s", "stratum": "random"})  # fmt: skip
    judge, sent = FixedJudge(), Sent()
    scorer.handle(judge, [value], sent)  # type: ignore[arg-type]
    scorer.handle(judge, [value], sent)  # type: ignore[arg-type]
    assert judge.batches == [["a"]]
    assert [r["trace_id"] for r in sent.records] == ["t1", "t1"]
    assert sample(registry, "rag_judge_scorer_pairs_total", outcome="duplicate") == 1


class VerdictJudge(FixedJudge):
    """Ends each pair as its answer says: a score, no claims, or an error."""

    def score(self, pairs: list[JudgePair]) -> list[JudgeResult]:
        verdicts = {"scored": JudgeResult.scored(0.75), "no_claims": JudgeResult("no_claims"),
                    "error": JudgeResult.failed("timeout")}  # fmt: skip
        return [verdicts[p.answer] for p in pairs]


def test_a_pair_the_judge_gives_no_score_is_published_with_its_outcome() -> None:
    """Every judged pair is published: a score as before, an error or no_claims as its
    outcome without a score; a sidecar reads each back as the event an inline judge emits
    (JudgeScore, UnscoredAnswer) and refuses an outcome no scorer's judge ends with."""
    registry = SidecarRegistry()
    config = Config.model_validate({"detectors": {"faithfulness": {"judge_location": "kafka"}}})
    scorer = Scorer(config.detectors.faithfulness, config.collectors.kafka, registry)
    answers = ("scored", "no_claims", "error")
    values = [orjson.dumps({"trace_id": a, "premise": "p", "answer": a, "question": None,
                            "variant": "production", "service": "s", "stratum": "random"})
              for a in answers]  # fmt: skip
    sent = Sent()
    scorer.handle(VerdictJudge(), values, sent)  # type: ignore[arg-type]
    verdicts = {r["trace_id"]: verdict_from_record(orjson.dumps(r)) for r in sent.records}
    judge = judge_identity(config.detectors.faithfulness)
    assert verdicts == {
        "scored": JudgeScore("scored", 0.75, config.detectors.faithfulness.threshold, judge),
        "no_claims": UnscoredAnswer("no_claims", "no_claims", judge),
        "error": UnscoredAnswer("error", "error", judge),
    }
    assert sample(registry, "rag_judge_scores_published_total", outcome="ok") == 3
    refused = {"trace_id": "t", "outcome": "no_context", "judge": "hhem"}
    with pytest.raises(ValueError, match="outcome"):
        verdict_from_record(orjson.dumps(refused))


def test_kafka_judging_without_brokers_is_refused_at_start() -> None:
    """judge_location: kafka without collectors.kafka.bootstrap_servers names the key."""
    from detectors.faithfulness.detector import FaithfulnessDetector

    config = Config.model_validate({"detectors": {"faithfulness": {"judge_location": "kafka"}}})
    with pytest.raises(ValueError, match=r"collectors\.kafka\.bootstrap_servers"):
        FaithfulnessDetector(
            config.detectors.faithfulness, SidecarRegistry(), kafka=config.collectors.kafka
        )
