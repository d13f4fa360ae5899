"""Judging off the pod on a real broker: sidecars in ``judge_location: kafka`` publish
sampled pairs, ``rag-monitor score`` processes judge them with a tiny HHEM checkpoint,
and the scores come back to every sidecar as JudgeScore events; with the LLM judge (a fake
model server at the network boundary), answers it gives no score come back as
UnscoredAnswer events with their outcome."""

from __future__ import annotations

import functools
import itertools
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest

from detectors.faithfulness.scorer import MAX_POLL_RECORDS
from monitor.contract.sampler import trace_fraction
from monitor.contract.trace import Event, UnscoredAnswer
from monitor.runtime.sidecar import Sidecar
from tests.conftest import REPO, SidecarProcess, sample, unique, wait_until
from tests.fake_openai import FakeOpenAI, fake_openai
from tests.hhem_checkpoint import build_checkpoint
from tests.integration.conftest import (
    Broker,
    kafka_settings,
    rag_trace,
    store_of,
    trace_id,
)
from tests.integration.test_llm_judge import CASES, KEY, KEY_ENV, script
from tests.integration.test_llm_judge import settings as llm_judge_settings
from tests.integration.test_review_sidecar import JudgeScores

pytestmark = pytest.mark.integration

StartSidecar = Callable[..., Sidecar]
SERVICE = "checkout"


class ScorerProcess(SidecarProcess):
    """``python -m monitor score`` with a written config; metrics scraped over HTTP."""

    def start(self) -> ScorerProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "monitor", "score", "--config", str(self.config_path)],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return self


@pytest.fixture
def scorers(tmp_path: Path) -> Iterator[Callable[[dict[str, Any], int], list[ScorerProcess]]]:
    """Start scorer processes; all are killed after the test."""
    started: list[ScorerProcess] = []

    def start(config: dict[str, Any], count: int) -> list[ScorerProcess]:
        made = [ScorerProcess(tmp_path, config, f"scorer-{len(started) + i}") for i in range(count)]
        started.extend(process.start() for process in made)
        return made

    yield start
    for process in started:
        process.kill()


def setup_topics(broker: Broker, sidecars: int) -> dict[str, str]:
    names = {
        "traces": broker.create_topic(unique("traces"), sidecars),
        "feedback": broker.create_topic(unique("feedback"), sidecars),
        "requests": broker.create_topic(unique("judge-requests"), 4),
        "results": broker.create_topic(unique("judge-results"), 2),
    }
    return names | {"group": unique("scorers")}


def kafka_judging(topics: dict[str, str], **settings: Any) -> dict[str, Any]:
    """``detectors.faithfulness`` in kafka mode on ``topics``, shared by all roles."""
    return {
        "judge_location": "kafka",
        "max_per_second": 10_000,
        "min_scored_per_hour": 0,
        "remote": {
            "requests_topic": topics["requests"],
            "results_topic": topics["results"],
            "group_id": topics["group"],
        },
        **settings,
    }


def faithfulness(tmp_path: Path, topics: dict[str, str], **settings: Any) -> dict[str, Any]:
    """``kafka_judging`` with HHEM on a tiny checkpoint."""
    checkpoint = tmp_path / "hhem" / "hhem"
    if not checkpoint.exists():
        assert build_checkpoint(tmp_path / "hhem")[0] == checkpoint
    return kafka_judging(topics, model=str(checkpoint), precision="fp32", **settings)


def roles(broker: Broker, topics: dict[str, str], section: dict[str, Any]) -> dict[str, Any]:
    """The sections sidecars (one trace group) and scorers share, as one file would."""
    kafka = kafka_settings(broker.bootstrap, [topics["traces"]], feedback=topics["feedback"])
    return {"collectors": {"kafka": kafka}, "detectors": {"faithfulness": section}}


def start_sidecars(
    start_sidecar: StartSidecar, sections: dict[str, Any], count: int, state: Path
) -> list[tuple[Sidecar, JudgeScores]]:
    """``count`` sidecars of one trace group, each with its own state_dir under ``state``."""
    started = []
    for i in range(count):
        scores = JudgeScores()
        service = {"service": {"state_dir": str(state / f"sidecar-{i}")}}
        started.append((start_sidecar([scores], **sections, **service), scores))
    for sidecar, _ in started:  # every member joined: the group is stable before traffic
        wait_until(functools.partial(ready, sidecar), 60)
    return started


def ready(sidecar: Sidecar) -> bool:
    return all(sidecar.readiness.status().values())


def owns(scorer: ScorerProcess, partitions: int) -> bool:
    """The scorer holds ``partitions``; False while it starts (no /metrics yet)."""
    try:
        return scorer.metric("rag_judge_scorer_partitions") == partitions
    except AssertionError:
        return False


def wait_partitions(scorers: Sequence[ScorerProcess], each: int) -> None:
    for scorer in scorers:
        wait_until(functools.partial(owns, scorer, each), 90, 0.2)


def traces(count: int, **fields: Any) -> list[tuple[str, bytes]]:
    """``count`` answerable traces (an answer and a context with text) of one service."""
    made = []
    for i in range(count):
        tid = trace_id()
        record = {"trace_id": tid, "service_name": SERVICE, "query": f"question {i}",
                  "answer": f"The parcel left on day {i % 7}.",
                  "contexts": [{"doc_id": f"d{i}", "text": f"The parcel left on day {i % 5}."}],
                  **fields}  # fmt: skip
        made.append((tid, rag_trace(**record)))
    return made


def low_faithfulness(sidecar: Sidecar, count: int) -> bool:
    return store_of(sidecar).progress().queued.get("low_faithfulness") == count


def scorer_total(scorers: Sequence[ScorerProcess], name: str, **labels: str) -> float:
    return sum(s.metric(name, **labels) for s in scorers)


def published(sidecars: Sequence[tuple[Sidecar, JudgeScores]], **labels: str) -> float:
    return sum(sample(s.registry, "rag_judge_published_total", **labels) for s, _ in sidecars)


def test_two_sidecars_two_scorers_score_each_sampled_pair_once(
    broker: Broker,
    start_sidecar: StartSidecar,
    scorers: Callable[[dict[str, Any], int], list[ScorerProcess]],
    tmp_path: Path,
) -> None:
    """2,000 traces at 0.1 plus 50 thumbs-down: every sampled pair is judged once summed over
    two scorers, republished pairs count as duplicates, every score reaches both sidecars
    as a JudgeScore event, and the shared review queue takes each as low faithfulness. The
    scorers count each scored pair in the slices its sidecar sent with it."""
    topics = setup_topics(broker, 2)
    # threshold 1.0: every score is low, so review queues every scored trace
    section = faithfulness(tmp_path, topics, sample_rate=0.1, threshold=1.0)
    sections = roles(broker, topics, section)
    review_topic = broker.create_topic(unique("review"))
    broker.create_topic(f"{review_topic}-verdicts")
    sections["detectors"]["review"] = {
        "enabled": True, "random_rate": 0.0, "thumbs_down_rate": 0.0, "follow_up_rate": 0.0,
        "low_faithfulness_rate": 1.0, "weekly_reading": 0, "http": {"port": 0},
        "topic": review_topic, "max_per_hour": {"low_faithfulness": 10_000},
    }  # fmt: skip
    sections["detectors"]["slices"] = {"intents": ["shipping"]}
    pool = scorers(sections, 2)
    sidecars = start_sidecars(start_sidecar, sections, 2, tmp_path)
    wait_partitions(pool, 2)
    sent = traces(2000, intent="shipping")
    rated = {tid for tid, _ in sent if trace_fraction(tid) < 0.1}
    disliked = [(i, tid) for i, (tid, _) in enumerate(sent) if tid not in rated][:50]
    broker.produce(topics["traces"], [value for _, value in sent], partitions=2)
    feedback = [orjson.dumps({"trace_id": tid, "kind": "thumbs_down"}) for _, tid in disliked]
    for (index, _), value in zip(disliked, feedback, strict=True):  # the trace's partition
        broker.producer.send(topics["feedback"], value=value, partition=index % 2)
    broker.producer.flush()
    expected = rated | {tid for _, tid in disliked}

    def judged() -> float:
        return scorer_total(pool, "rag_judge_scorer_pairs_total", outcome="judged")

    wait_until(lambda: judged() >= len(expected), 120, 0.5)
    for _, scores in sidecars:
        wait_until(functools.partial(expected.issubset, scores.seen.keys()), 30)
    assert published(sidecars, stratum="random", outcome="ok") == len(rated)
    assert published(sidecars, stratum="thumbs_down", outcome="ok") == 50
    assert judged() == len(expected)
    assert scorer_total(pool, "rag_faithfulness_evaluations_total", outcome="scored") == len(
        expected
    )
    assert all(s.metric("rag_judge_scorer_pairs_total", outcome="judged") for s in pool)
    sliced = {
        (dimension, value): scorer_total(
            pool, "rag_slice_faithfulness_scored_total", dimension=dimension, slice=value
        )
        for dimension, value in (("intent", "shipping"), ("document_type", "none"))
    }
    assert sliced == {
        ("intent", "shipping"): len(expected),
        ("document_type", "none"): len(expected),
    }
    assert all(scores.seen.keys() == expected for _, scores in sidecars)
    for sidecar, _ in sidecars:  # each replica queued its own; the topic shares them
        wait_until(functools.partial(low_faithfulness, sidecar, len(expected)), 30)

    again = [r.value for r in broker.read(topics["requests"])[:20]]
    broker.produce(topics["requests"], again, partitions=4)  # as a redelivery would
    wait_until(
        lambda: scorer_total(pool, "rag_judge_scorer_pairs_total", outcome="duplicate") == 20, 30
    )
    assert judged() == len(expected)


def test_a_killed_scorer_loses_nothing_sampled(
    broker: Broker,
    start_sidecar: StartSidecar,
    scorers: Callable[[dict[str, Any], int], list[ScorerProcess]],
    tmp_path: Path,
) -> None:
    """kill -9 one of two scorers mid-stream: the other takes its partitions, and every
    sampled trace is either settled at the sidecar (no_context) or published and scored."""
    topics = setup_topics(broker, 1)
    section = faithfulness(tmp_path, topics, sample_rate=1.0)
    sections = roles(broker, topics, section)
    pool = scorers(sections, 2)
    [(sidecar, scores)] = start_sidecars(start_sidecar, sections, 1, tmp_path)
    wait_partitions(pool, 2)
    answered = traces(600)
    without_context = traces(40, contexts=[{"doc_id": "d"}])
    stream = answered + without_context
    for start in range(0, len(stream), 40):
        broker.produce(topics["traces"], [v for _, v in stream[start : start + 40]])
        if start == 200:
            wait_until(lambda: pool[0].metric("rag_judge_scorer_pairs_total") > 0, 30)
            pool[0].stop(9)
    survivor = pool[1]
    wait_until(lambda: survivor.metric("rag_judge_scorer_partitions") == 4, 60, 0.2)
    wanted = {tid for tid, _ in answered}
    wait_until(lambda: wanted <= scores.seen.keys(), 120, 0.5)

    registry = sidecar.registry
    assert sample(registry, "rag_monitor_samples_total", outcome="dropped") == 0
    no_context = sample(registry, "rag_faithfulness_evaluations_total", outcome="no_context")
    sent = sample(registry, "rag_judge_published_total", outcome="ok")
    assert (no_context, sent) == (40, 600)
    results = [orjson.loads(r.value)["trace_id"] for r in broker.read(topics["results"])]
    assert set(results) == wanted  # every published pair scored, nothing else
    # A pair judged but not yet committed when the scorer died is judged again: one poll.
    assert len(results) - len(wanted) <= MAX_POLL_RECORDS


def judged_per_window(
    broker: Broker,
    topic: str,
    judged: Callable[[], float],
    *,
    per_second: int,
    windows: int,
    window_s: float,
) -> list[float]:
    """Produce ``per_second`` traces a second to ``topic``'s 4 partitions, a quarter of them
    every 0.25 s, for ``windows`` windows of ``window_s``: what ``judged`` grew in each."""
    ticks_per_s = 4
    start = time.monotonic()
    readings = [judged()]
    tick = 0
    for window in range(1, windows + 1):
        while tick < window * window_s * ticks_per_s:
            batch = traces(per_second // ticks_per_s)
            broker.produce(topic, [value for _, value in batch], partitions=4)
            tick += 1
            time.sleep(max(0.0, start + tick / ticks_per_s - time.monotonic()))
        readings.append(judged())
    return [after - before for before, after in itertools.pairwise(readings)]


def test_four_sidecars_meet_one_floor_per_service_at_an_even_rate(
    broker: Broker,
    start_sidecar: StartSidecar,
    scorers: Callable[[dict[str, Any], int], list[ScorerProcess]],
    tmp_path: Path,
) -> None:
    """4 sidecars at low traffic (16 traces/s, 4 each) raise their rate to their floor (6/s:
    every trace) and publish 2.7x the service's floor; the two scorers judge one floor
    between them, spread evenly: 36 in each 6 s window after the first (which holds the
    burst), each within [0.5, 1.75]x, not all at the start and then none."""
    # The acceptance's 60 s windows and floor/60 shortened: a floor of 6/s in 6 s windows.
    window_s, floor_per_hour = 6.0, 21_600
    topics = setup_topics(broker, 4)
    section = faithfulness(
        tmp_path,
        topics,
        sample_rate=0.0001,
        min_scored_per_hour=floor_per_hour,
        remote={**kafka_judging(topics)["remote"], "floor_burst_s": 5},
    )
    sections = roles(broker, topics, section)
    pool = scorers(sections, 2)
    sidecars = start_sidecars(start_sidecar, sections, 4, tmp_path)
    wait_partitions(pool, 2)

    def judged() -> float:
        return scorer_total(pool, "rag_judge_scorer_pairs_total", outcome="judged")

    counts = judged_per_window(
        broker, topics["traces"], judged, per_second=16, windows=6, window_s=window_s
    )
    expected = floor_per_hour / 3600 * window_s
    assert all(0.5 <= n / expected <= 1.75 for n in counts[1:]), counts
    # Every published pair is accounted for: judged, shed (its floor met) or a duplicate.
    wait_until(
        lambda: (
            scorer_total(pool, "rag_judge_scorer_pairs_total") >= published(sidecars, outcome="ok")
        ),
        60,
        0.5,
    )
    shed = scorer_total(pool, "rag_judge_scorer_pairs_total", outcome="floor_met")
    again = scorer_total(pool, "rag_judge_scorer_pairs_total", outcome="duplicate")
    assert judged() + shed + again == published(sidecars, outcome="ok")
    assert shed > judged()  # about 10 of 16 candidates a second were not needed


class Verdicts(JudgeScores):
    """``JudgeScores``, and the outcome of each answer settled without a score."""

    name: ClassVar[str] = "verdicts"

    def __init__(self) -> None:
        super().__init__()
        self.unscored: dict[str, str] = {}

    def observe_event(self, event: Event) -> None:
        super().observe_event(event)
        if isinstance(event, UnscoredAnswer):
            self.unscored[event.trace_id] = event.outcome

    def received(self) -> dict[str, float | str]:
        return {**self.seen, **self.unscored}


# Answers scripted at the fake model server (test_llm_judge.CASES): scored, without claims,
# a malformed reply, and a server failing every try.
LLM_ANSWERS = (
    "Refunds take 30 days, shipping is free, returns are easy and staff are kind.",
    "Happy to help!",
    "The reply is not JSON.",
    "The server fails twice.",
)


@pytest.fixture
def llm_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeOpenAI]:
    """The fake model server, and its key in the environment the scorer process inherits."""
    monkeypatch.setenv(KEY_ENV, KEY)
    with fake_openai(script()) as server:
        yield server


def test_an_answer_the_scorer_could_not_score_reaches_the_sidecar_with_its_outcome(
    broker: Broker,
    start_sidecar: StartSidecar,
    scorers: Callable[[dict[str, Any], int], list[ScorerProcess]],
    llm_server: FakeOpenAI,
) -> None:
    """A scorer process judging with the LLM judge: a scored answer comes back to the
    sidecar as its score, one without claims as no_claims, and a malformed reply or a
    server failing every try as error; the scorer counts each outcome once."""
    topics = setup_topics(broker, 1)
    sections = roles(
        broker, topics, kafka_judging(topics, **llm_judge_settings(llm_server.endpoint))
    )
    [scorer] = scorers(sections, 1)
    verdicts = Verdicts()
    sidecar = start_sidecar([verdicts], **sections)
    wait_until(functools.partial(ready, sidecar), 60)
    wait_partitions([scorer], 4)
    expected: dict[str, float | str] = {}
    for answer in LLM_ANSWERS:
        [(tid, value)] = traces(1, answer=answer)
        broker.produce(topics["traces"], [value])
        case = CASES[answer]
        expected[tid] = case.outcome if case.score is None else case.score

    wait_until(lambda: verdicts.received().keys() == expected.keys(), 60, 0.2)
    assert verdicts.received() == expected
    assert sample(sidecar.registry, "rag_judge_published_total", outcome="ok") == 4
    counted = {
        outcome: scorer.metric("rag_faithfulness_evaluations_total", outcome=outcome)
        for outcome in ("scored", "no_claims", "error")
    }
    assert counted == {"scored": 1, "no_claims": 1, "error": 2}
    assert len(llm_server.requests_for("The server fails twice.")) == 2  # one retry
