"""The faithfulness detector end to end: real OTLP traffic in, HHEM scores and counters out."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from structlog.testing import capture_logs

from detectors.faithfulness import FaithfulnessDetector
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.detector import SCORE_BUCKETS
from detectors.faithfulness.hhem import HhemScorer, PreparedPair, length_batches, read_checkpoint
from detectors.faithfulness.triage import OUTCOMES, split_sentences
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Context, Event, Feedback, JudgeScore, RagTrace, UnscoredAnswer
from monitor.runtime.sidecar import Sidecar
from tests.conftest import sample, wait_until
from tests.hhem_checkpoint import TINY, Tiny, build_checkpoint, reference_scores
from tests.otel_traffic import RagRequest, emit_rag_request, tracer_for

PREMISE = "Refunds are possible within 30 days.\n\nShipping is free above 50 euros."
CONTEXTS = (
    Context(doc_id="d1", text="Refunds are possible within 30 days."),
    Context(doc_id="d2", text=None),  # a context without text adds nothing to the premise
    Context(doc_id="d3", text="Shipping is free above 50 euros."),
)
ANSWERS = [
    "Refunds are possible within 30 days.",
    "Shipping always costs 5 dollars.",
    "You can return items for a refund.",
    "Shipping is free on large orders. Refunds take a year.",
    "The store is closed on Sundays.",
    "Free shipping starts at 50 euros.",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    return build_checkpoint(tmp_path_factory.mktemp("hhem"))


@pytest.fixture
def detectors() -> Iterator[Callable[..., FaithfulnessDetector]]:
    """Started detectors on fresh registries, shut down after the test."""
    started: list[FaithfulnessDetector] = []

    def start(model: Path | str, queue_size: int = 128, **settings: Any) -> FaithfulnessDetector:
        config = FaithfulnessConfig.model_validate(
            {"model": str(model), "sample_rate": 1.0, "max_per_second": 1e6, "precision": "fp32"}
            | settings
        )
        detector = FaithfulnessDetector(config, SidecarRegistry(), queue_size=queue_size)
        detector.start()
        started.append(detector)
        return detector

    yield start
    for detector in started:
        detector.shutdown()


def rag_trace(index: int, answer: str | None, contexts: tuple[Context, ...] = CONTEXTS) -> RagTrace:
    return RagTrace(
        trace_id=f"{index:032x}",
        time=datetime.now(UTC),
        source="kafka",
        root_span_id=f"{index:016x}",
        answer=answer,
        contexts=contexts,
    )


def outcome(detector: FaithfulnessDetector, name: str) -> float:
    return sample(detector.registry, "rag_faithfulness_evaluations_total", outcome=name)


def evaluated(detector: FaithfulnessDetector) -> float:
    return sum(outcome(detector, o) for o in OUTCOMES)


def ready(detector: FaithfulnessDetector) -> None:
    wait_until(lambda: detector.worker.state == "ready", timeout=60)


def test_sidecar_scores_otlp_traffic_exactly_as_hhem_does(
    start_sidecar: Callable[..., Sidecar], tiny: Tiny
) -> None:
    """Real OTLP spans in; histogram sum and count, buckets and below-threshold match HHEM."""
    directory, model = tiny
    sidecar = start_sidecar(
        detectors={
            "faithfulness": {
                "model": str(directory),
                "sample_rate": 1.0,
                "max_per_second": 1000,
                "precision": "fp32",
            }
        }
    )
    registry = sidecar.registry
    wait_until(
        lambda: sample(registry, "rag_monitor_detector_up", detector="faithfulness") == 1, 60
    )
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{sidecar.http.port}/v1/traces")  # type: ignore[union-attr]
    provider, tracer = tracer_for(exporter)
    base = time.time_ns()
    for i, answer in enumerate(ANSWERS):
        emit_rag_request(
            tracer, RagRequest(start_ns=base + i * 10**9, extra={"output.value": answer})
        )
    provider.shutdown()
    # otel_traffic's documents: d1 and d2, each with the content "text of <id>".
    expected = reference_scores(model, [("text of d1\n\ntext of d2", a) for a in ANSWERS])
    wait_until(
        lambda: (
            sample(registry, "rag_faithfulness_evaluations_total", outcome="scored") == len(ANSWERS)
        ),
        timeout=60,
    )
    assert sample(registry, "rag_faithfulness_score_count") == len(ANSWERS)
    assert sample(registry, "rag_faithfulness_score_sum") == pytest.approx(sum(expected), abs=1e-5)
    for bound in (0.25, 0.5, 0.75):
        got = sample(registry, "rag_faithfulness_score_bucket", le=str(bound))
        assert got == sum(s <= bound for s in expected), bound
    below = sample(registry, "rag_faithfulness_below_threshold_total")
    assert below == sum(s < 0.5 for s in expected)
    assert 0 < below < len(ANSWERS)
    assert sample(
        registry, "rag_monitor_samples_total", detector="faithfulness", outcome="queued"
    ) == len(ANSWERS)


def test_probes_are_scored_at_any_sample_rate(
    start_sidecar: Callable[..., Sidecar], tiny: Tiny
) -> None:
    """With sample_rate near zero every probe (rag.probe_id) is still scored, nothing else is."""
    directory, _ = tiny
    sidecar = start_sidecar(
        detectors={
            "faithfulness": {
                "model": str(directory),
                "sample_rate": 1e-9,
                "min_scored_per_hour": 0,  # no floor: only the probes
                "precision": "fp32",
            }
        }
    )
    registry = sidecar.registry
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{sidecar.http.port}/v1/traces")  # type: ignore[union-attr]
    provider, tracer = tracer_for(exporter)
    base = time.time_ns()
    for i in range(4):
        emit_rag_request(tracer, RagRequest(start_ns=base + i, extra={"rag.probe_id": f"q{i}"}))
        emit_rag_request(tracer, RagRequest(start_ns=base + i))
    provider.shutdown()
    wait_until(lambda: sample(registry, "rag_requests_total", source="otlp") == 8)
    wait_until(
        lambda: sample(registry, "rag_faithfulness_evaluations_total", outcome="scored") == 4, 60
    )
    time.sleep(0.3)
    assert sample(registry, "rag_faithfulness_evaluations_total", outcome="scored") == 4


def test_bucket_bounds_step_by_five_hundredths() -> None:
    """The score histogram has a bucket every 0.05 from 0.05 to 1."""
    expected = tuple(round(0.05 * i, 2) for i in range(1, 21))
    assert expected == SCORE_BUCKETS


def test_empty_answers_and_refusals_are_counted_apart_from_scores(
    detectors: Callable[..., FaithfulnessDetector], tiny: Tiny
) -> None:
    """No answer (None or empty) is no_answer, a blank one no_claims, refusals are refusal;
    none reaches the histogram."""
    directory, model = tiny
    detector = detectors(directory)
    ready(detector)
    answers = [
        None,
        "",
        "   \n",
        "I don't know.",
        "Sorry, I can\u2019t help with that.",
        "The provided context does not mention refunds.",
        ANSWERS[0],
    ]
    for i, answer in enumerate(answers):
        detector.observe(rag_trace(i, answer))
    wait_until(lambda: evaluated(detector) == len(answers))
    assert outcome(detector, "no_answer") == 2
    assert outcome(detector, "no_claims") == 1
    assert outcome(detector, "refusal") == 3
    assert outcome(detector, "scored") == 1
    registry = detector.registry
    assert sample(registry, "rag_faithfulness_score_count") == 1
    expected = reference_scores(model, [(PREMISE, ANSWERS[0])])[0]
    assert sample(registry, "rag_faithfulness_score_sum") == pytest.approx(expected, abs=1e-5)


# What a trace carries when its retriever returned nothing, or the mapping found no documents.
NO_EVIDENCE = {
    "no contexts": (),
    "contexts without text": (Context(doc_id="d1"), Context(doc_id="d2", text="")),
    "blank texts": (Context(doc_id="d1", text="  \n "),),
}


def test_answers_without_documents_are_no_context_and_never_reach_hhem(tiny: Tiny) -> None:
    """The issue's case: 10 RAG traces whose retriever returned no documents, sampled at
    rate 1, end as no_context (settled before the queue, contexts counted missing): no
    score, no below-threshold, no JudgeScore but an UnscoredAnswer no_context each; two
    traces with documents are still scored."""
    directory, _ = tiny
    config = FaithfulnessConfig.model_validate(
        {"model": str(directory), "sample_rate": 1.0, "max_per_second": 1e6, "precision": "fp32"}
    )
    events: list[Event] = []
    detector = FaithfulnessDetector(
        config, SidecarRegistry(), emit=lambda event: events.append(event) is None
    )
    detector.start()
    try:
        ready(detector)
        forms = list(NO_EVIDENCE.values())
        for i in range(10):
            detector.observe(rag_trace(i, ANSWERS[i % 6], contexts=forms[i % len(forms)]))
        detector.observe(rag_trace(10, ANSWERS[0]))
        detector.observe(rag_trace(11, ANSWERS[1]))
        wait_until(lambda: evaluated(detector) == 12, timeout=60)
    finally:
        detector.shutdown()
    registry = detector.registry
    assert outcome(detector, "no_context") == 10
    assert outcome(detector, "scored") == 2
    assert sample(registry, "rag_faithfulness_score_count") == 2
    assert sample(registry, "rag_faithfulness_model_pairs_total") == 2
    unscored = [(e.trace_id, e.outcome) for e in events if isinstance(e, UnscoredAnswer)]
    assert unscored == [(f"{i:032x}", "no_context") for i in range(10)]  # settled in order
    assert len(events) == 12
    assert {e.trace_id for e in events if isinstance(e, JudgeScore)} == {f"{10:032x}", f"{11:032x}"}
    samples = {
        o: sample(registry, "rag_monitor_samples_total", detector="faithfulness", outcome=o)
        for o in ("settled", "queued", "dropped")
    }
    assert samples == {"settled": 10, "queued": 2, "dropped": 0}
    missing = "rag_monitor_detector_missing_inputs_total"
    assert sample(registry, missing, detector="faithfulness", field="contexts") == 10
    assert sample(registry, missing, detector="faithfulness", field="answer") == 0


@pytest.mark.parametrize(
    ("answer", "contexts", "expected", "missing"),
    [
        (ANSWERS[0], (), "no_context", ["contexts"]),
        (None, CONTEXTS, "no_answer", ["answer"]),
        ("", (), "no_answer", ["answer", "contexts"]),
        ("I don't know.", (), "refusal", []),
        ("  ", (), "no_claims", []),
    ],
    ids=["no-documents", "no-answer", "neither", "refusal-needs-no-documents", "blank-answer"],
)
def test_traces_the_model_need_not_see_are_settled_inline(
    answer: str | None, contexts: tuple[Context, ...], expected: str, missing: list[str]
) -> None:
    """Settled on the pipeline thread with its outcome, whatever the model's state: never
    queued; a field the outcome lacked is counted missing, one an outcome does not need
    (a refusal's or a blank answer's documents) is not."""
    config = FaithfulnessConfig.model_validate({"sample_rate": 1.0, "max_per_second": 1e6})
    detector = FaithfulnessDetector(config, SidecarRegistry())  # not started: no model
    detector.observe(rag_trace(1, answer, contexts))
    assert {o: outcome(detector, o) for o in OUTCOMES if outcome(detector, o)} == {expected: 1}
    assert detector.sampler.queue.qsize() == 0
    counted = {
        field
        for field in ("answer", "contexts")
        if sample(
            detector.registry,
            "rag_monitor_detector_missing_inputs_total",
            detector="faithfulness",
            field=field,
        )
    }
    assert counted == set(missing)


def test_a_thumbs_down_trace_without_documents_is_no_context() -> None:
    """A trace held for feedback and taken by thumbs-down is triaged like a sampled one."""
    config = FaithfulnessConfig.model_validate({"sample_rate": 1e-9, "min_scored_per_hour": 0})
    detector = FaithfulnessDetector(config, SidecarRegistry())
    detector.observe(rag_trace(7, ANSWERS[0], contexts=()))
    assert outcome(detector, "no_context") == 0
    detector.observe_event(Feedback(trace_id=f"{7:032x}", kind="thumbs_down"))
    assert outcome(detector, "no_context") == 1
    assert detector.sampler.queue.qsize() == 0


def test_a_scorer_failure_is_an_error_and_the_worker_goes_on(
    detectors: Callable[..., FaithfulnessDetector], tmp_path: Path
) -> None:
    """A pair the model cannot take (token ids beyond its vocabulary) is an error; others score."""
    directory, _ = build_checkpoint(tmp_path, size={**TINY, "vocab_size": 128})
    detector = detectors(directory)
    ready(detector)
    with capture_logs() as logs:
        detector.observe(rag_trace(1, "Ümlaut answers hit bytes beyond the vocabulary."))
        detector.observe(rag_trace(2, ANSWERS[0]))
        wait_until(lambda: evaluated(detector) == 2)
    assert outcome(detector, "error") == 1
    assert outcome(detector, "scored") == 1
    assert any(entry["event"] == "faithfulness_scoring_failed" for entry in logs)


def test_sentence_granularity_reports_the_supported_share(
    detectors: Callable[..., FaithfulnessDetector], tiny: Tiny
) -> None:
    """Each sentence is scored against the premise; the answer's score is the share >= threshold."""
    directory, model = tiny
    answer = " ".join(ANSWERS[:5])
    sentences = split_sentences(answer)
    assert len(sentences) == 6
    per_sentence = reference_scores(model, [(PREMISE, s) for s in sentences])
    threshold = 0.5
    detector = detectors(directory, granularity="sentence", threshold=threshold)
    ready(detector)
    detector.observe(rag_trace(1, answer))
    wait_until(lambda: outcome(detector, "scored") == 1)
    share = sum(s >= threshold for s in per_sentence) / len(per_sentence)
    assert 0 < share < 1
    assert sample(detector.registry, "rag_faithfulness_score_sum") == pytest.approx(share)


def test_a_repeated_pair_is_scored_once_and_counted_as_a_cache_hit(
    detectors: Callable[..., FaithfulnessDetector], tiny: Tiny
) -> None:
    """The same answer over the same contexts, twice: one model pair, one cache hit, two scores."""
    directory, _ = tiny
    detector = detectors(directory)
    ready(detector)
    detector.observe(rag_trace(1, ANSWERS[1]))
    wait_until(lambda: outcome(detector, "scored") == 1)
    detector.observe(rag_trace(2, ANSWERS[1]))
    wait_until(lambda: outcome(detector, "scored") == 2)
    registry = detector.registry
    assert sample(registry, "rag_faithfulness_model_pairs_total") == 1
    assert sample(registry, "rag_faithfulness_cache_hits_total") == 1


def test_a_cut_premise_is_counted(
    detectors: Callable[..., FaithfulnessDetector], tiny: Tiny
) -> None:
    """A premise over max_premise_tokens is scored truncated, and the truncation is counted."""
    directory, _ = tiny
    detector = detectors(directory, max_premise_tokens=20)
    ready(detector)
    detector.observe(rag_trace(1, ANSWERS[0]))
    detector.observe(rag_trace(2, ANSWERS[0], contexts=(Context(doc_id="d1", text="Short."),)))
    wait_until(lambda: outcome(detector, "scored") == 2)
    assert sample(detector.registry, "rag_faithfulness_truncated_total") == 1


def test_overload_sheds_and_counts_while_ingestion_goes_on(
    detectors: Callable[..., FaithfulnessDetector], tiny: Tiny
) -> None:
    """5,000 traces offered far faster than the model scores: observe never waits, the queue
    stays bounded, every offer is queued or dropped, and everything queued is evaluated."""
    directory, _ = tiny
    detector = detectors(directory, queue_size=16, cache_size=0)
    ready(detector)
    started = time.perf_counter()
    for i in range(5000):
        detector.observe(rag_trace(i, f"Answer number {i} about refunds."))
        assert detector.sampler.queue.qsize() <= 16
    assert time.perf_counter() - started < 5.0
    registry = detector.registry
    queued = sample(
        registry, "rag_monitor_samples_total", detector="faithfulness", outcome="queued"
    )
    dropped = sample(
        registry, "rag_monitor_samples_total", detector="faithfulness", outcome="dropped"
    )
    assert queued + dropped == 5000
    assert dropped > 4000
    wait_until(lambda: evaluated(detector) == queued, timeout=60)


def test_a_missing_model_reports_down_and_how_to_fetch_it(
    detectors: Callable[..., FaithfulnessDetector], tmp_path: Path
) -> None:
    """No model: up is 0, one log line says how to fetch it, and nothing is sampled."""
    with capture_logs() as logs:
        detector = detectors(tmp_path / "no-model-here")
        wait_until(lambda: detector.worker.state == "missing")
    registry = detector.registry
    assert sample(registry, "rag_monitor_detector_up", detector="faithfulness") == 0
    missing = [entry for entry in logs if entry["event"] == "faithfulness_model_missing"]
    assert len(missing) == 1
    assert (
        "huggingface-cli download vectara/hallucination_evaluation_model"
        in missing[0]["how_to_fix"]
    )
    detector.observe(rag_trace(1, ANSWERS[0]))
    assert (
        sample(registry, "rag_monitor_samples_total", detector="faithfulness", outcome="queued")
        == 0
    )


@pytest.mark.parametrize(
    ("lengths", "batch_size", "expected"),
    [
        ([10, 10, 10, 10], 2, [[0, 1], [2, 3]]),
        ([100, 10, 11, 95], 4, [[1, 2], [3, 0]]),
        ([5, 50, 500], 8, [[0], [1], [2]]),
        ([7], 1, [[0]]),
        ([], 4, []),
    ],
    ids=["by-size", "sorted-by-length", "padding-bound", "single", "empty"],
)
def test_length_batches_keep_padding_small(
    lengths: list[int], batch_size: int, expected: list[list[int]]
) -> None:
    """Pairs are grouped by length, batch_size at most, cut where padding would pass 20%."""
    pairs = [PreparedPair(list(range(n)), truncated=False) for n in lengths]
    assert length_batches(pairs, batch_size) == expected


def test_batched_scores_equal_one_at_a_time(tiny: Tiny) -> None:
    """Padding in a batch does not change a pair's score (right padding, masked)."""
    directory, _ = tiny
    scorer = HhemScorer(read_checkpoint(str(directory)))
    pairs = [(PREMISE, a) for a in ANSWERS]
    assert scorer.score(pairs, batch_size=6) == pytest.approx(scorer.score(pairs), abs=1e-5)
