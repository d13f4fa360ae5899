"""The review loop in a real sidecar: OTLP/HTTP spans in, items queued per stratum, no
production text in any log line, and two replicas sharing one queue through Kafka."""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import orjson
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from structlog.testing import capture_logs

from detectors.review.config import MaxPerHour
from detectors.review.model import Stratum, Verdict
from detectors.review.report import write_report
from detectors.review.sampler import stratum_fraction
from monitor.contract.detector import InlineDetector
from monitor.contract.trace import Event, JudgeScore, RagTrace
from monitor.runtime.sidecar import Sidecar
from tests.conftest import sample, unique, wait_until
from tests.hhem_checkpoint import build_checkpoint
from tests.integration.conftest import Broker, kafka_settings, post, review_detector, store_of
from tests.otel_traffic import MemoryExporter, RagRequest, emit_rag_request, tracer_for

pytestmark = pytest.mark.integration

StartSidecar = Callable[..., Sidecar]
TOKEN = "review-test-token"  # noqa: S105 (a test secret)
AUTH = {"Authorization": f"Bearer {TOKEN}"}
PROTO = "application/x-protobuf"
MARKER = "ZQXMARKER"


class JudgeScores(InlineDetector):
    """An extra detector recording the JudgeScore events the pipeline hands it."""

    name: ClassVar[str] = "judge_scores"

    def __init__(self) -> None:
        self.seen: dict[str, float] = {}

    def observe(self, trace: RagTrace) -> None:
        del trace

    def observe_event(self, event: Event) -> None:
        if isinstance(event, JudgeScore):
            self.seen[event.trace_id] = event.score


def send(sidecar: Sidecar, requests: list[tuple[RagRequest, dict[str, object]]]) -> list[str]:
    """Each request as one OTLP/HTTP protobuf POST; their trace ids."""
    ids = []
    for request, extra in requests:
        exporter = MemoryExporter()
        _, tracer = tracer_for(exporter)
        ids.append(emit_rag_request(tracer, RagRequest(**{**request.__dict__, "extra": extra})))
        body = encode_spans(exporter.spans).SerializeToString()
        assert post(sidecar, "/v1/traces", body, PROTO, AUTH)[0] == 200
    return ids


def request(index: int, session: str, query: str) -> tuple[RagRequest, dict[str, object]]:
    """Request ``index`` of ``session``: marker strings in its query, answer and contexts."""
    base = RagRequest(
        start_ns=time.time_ns() + index,
        documents=((f"doc-{MARKER}-{index}", "acme"), ("d2", "acme")),
    )
    extra: dict[str, object] = {
        "input.value": f"{query} {MARKER}-query-{index}",
        "output.value": f"The answer is {MARKER}-answer-{index}.",
        "session.id": session,
    }
    return base, extra


def review_settings(tmp_path: Path, *, score: bool = True, **review: Any) -> dict[str, Any]:
    """A sidecar with the review loop on and, with ``score``, HHEM on a tiny checkpoint."""
    faithfulness: dict[str, Any] = {"enabled": False}
    if score:
        checkpoint, _ = build_checkpoint(tmp_path / "hhem")
        faithfulness = {
            "model": str(checkpoint),
            "sample_rate": 1.0,
            "max_per_second": 1000,
            "threshold": 1.0,  # every score is under it: every scored trace is "low"
            "precision": "fp32",  # no start-up measurement: this test is about review
        }
    return {
        "service": {"state_dir": str(tmp_path / "state"), "auth_token_env": "REVIEW_TEST_TOKEN"},
        "detectors": {
            "faithfulness": faithfulness,
            "review": {
                "enabled": True,
                "random_rate": 0.25,
                "low_faithfulness_rate": 0.5,
                "weekly_reading": 0,
                # bounds out of reach (their bursts hold 833 each): these tests count strata
                "max_per_hour": dict.fromkeys(MaxPerHour.model_fields, 10_000),
                "http": {"port": 0},
                **review,
            },
        },
    }


def test_sidecar_queues_items_per_stratum_without_text_in_logs(
    start_sidecar: StartSidecar,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
) -> None:
    """40 sessions of a question and a follow-up ("Are you sure?" in every other one), 5
    thumbs-down: each stratum holds exactly the traces it selects, HHEM scores arrive through
    the event hook, and no query, answer or context text reaches a log line."""
    monkeypatch.setenv("REVIEW_TEST_TOKEN", TOKEN)
    with capture_logs() as logs:
        scores = JudgeScores()
        sidecar = start_sidecar([scores], **review_settings(tmp_path))
        registry = sidecar.registry
        wait_until(
            lambda: sample(registry, "rag_monitor_detector_up", detector="faithfulness") == 1, 60
        )
        requests = []
        for s in range(40):
            requests.append(request(2 * s, f"session-{s}", "How do I reset the router?"))
            follow = "Are you SURE about that?" if s % 2 == 0 else "thanks, and the modem?"
            requests.append(request(2 * s + 1, f"session-{s}", follow))
        ids = send(sidecar, requests)
        # Feedback comes after the answer: once span assembly has let the traces go.
        wait_until(lambda: sample(registry, "rag_requests_total", source="otlp") == 80)
        for trace_id in ids[:5]:
            body = orjson.dumps({"trace_id": trace_id, "kind": "thumbs_down"})
            assert post(sidecar, "/v1/feedback", body, "application/json", AUTH)[0] == 200

        detector = review_detector(sidecar)
        wait_until(
            lambda: sample(registry, "rag_faithfulness_evaluations_total", outcome="scored") == 80,
            timeout=120,
        )
        wait_until(lambda: len(scores.seen) == 80)  # every score reached every detector
        expected = {
            "follow_up": 20,
            "thumbs_down": 5,
            "random": _hash_count(ids, "random", 0.25),
            "low_faithfulness": _hash_count(
                [t for t in ids if scores.seen[t] < 1.0], "low_faithfulness", 0.5
            ),
        }

        def progress() -> dict[str, int]:
            assert detector.store is not None
            return {k: v for k, v in detector.store.progress().queued.items() if k in expected}

        wait_until(lambda: progress() == expected, timeout=30)
        for stratum, count in expected.items():
            assert sample(registry, "rag_review_sampled_total", stratum=stratum) == count
        assert detector.store is not None
        queued = detector.store.get(ids[0])
        assert queued is not None
        assert "thumbs_down" in queued.strata
        assert queued.query.endswith(f"{MARKER}-query-0")
        store = store_of(sidecar)
        wait_until(lambda: (item := store.get(ids[0])) and item.hhem_score is not None)
        assert (
            sample(registry, "rag_monitor_records_total", collector="internal", outcome="ok") == 80
        )
        assert sample(registry, "rag_monitor_events_total", type="judge_score") == 80
        sidecar.shutdown()
    out, err = capfd.readouterr()
    assert MARKER not in out + err
    assert not [event for event in logs if MARKER in repr(event)]
    assert logs  # the capture worked: the sidecar logged its start and stop


def _hash_count(ids: list[str], stratum: Stratum, rate: float) -> int:
    return sum(stratum_fraction(stratum, t) < rate for t in ids)


def test_verdict_counts_agreement_and_sends_a_label(
    start_sidecar: StartSidecar, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A verdict on a scored item counts judge agreement and reaches the pipeline as a label
    of its relevant and missing documents."""
    monkeypatch.setenv("REVIEW_TEST_TOKEN", TOKEN)
    sidecar = start_sidecar(**review_settings(tmp_path, random_rate=1.0))
    registry = sidecar.registry
    [trace_id] = send(sidecar, [request(0, "s", "what is it?")])
    detector, store = review_detector(sidecar), store_of(sidecar)
    wait_until(lambda: (item := store.get(trace_id)) and item.hhem_score is not None, 120)
    item = store.get(trace_id)
    assert item is not None
    verdict = Verdict(trace_id, "no", relevant_doc_ids=("d2",), missing_doc_ids=("d9",))
    store.record(verdict)
    detector.on_verdict(item, verdict)
    assert sample(registry, "rag_review_judge_agreement_total", hhem="unsupported", human="no") == 1
    wait_until(lambda: sample(registry, "rag_monitor_events_total", type="label") == 1)


def _annotations(*results: tuple[str, float]) -> dict[str, object]:
    """OpenInference annotations on the root span: (evaluation name, score) each."""
    attributes: dict[str, object] = {}
    for i, (name, score) in enumerate(results):
        attributes[f"annotations.{i}.annotation.name"] = name
        attributes[f"annotations.{i}.annotation.score"] = score
    return attributes


EVALUATIONS = {
    "evaluations": {
        "groundedness": {"score_min": 0.5, "compare_with_review": True},
        "answer_relevancy": {"score_min": 0.7},  # about relevance: not compared with review
    }
}


def test_a_verdict_posted_on_the_page_counts_agreement_per_evaluation(
    start_sidecar: StartSidecar, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request carrying evaluation results is queued with the outcome of the evaluation
    compared with review only; a verdict posted on the review page counts that evaluation's
    agreement, and the report shows it."""
    monkeypatch.setenv("REVIEW_TEST_TOKEN", TOKEN)
    settings = review_settings(tmp_path, score=False, random_rate=1.0)
    settings["detectors"]["evaluations"] = EVALUATIONS
    sidecar = start_sidecar(**settings)
    registry = sidecar.registry
    base, extra = request(0, "s", "what is it?")
    extra.update(_annotations(("groundedness", 0.2), ("answer_relevancy", 0.1)))
    [trace_id] = send(sidecar, [(base, extra)])
    store = store_of(sidecar)
    wait_until(lambda: (item := store.get(trace_id)) is not None and item.evaluations != ())
    item = store.get(trace_id)
    assert item is not None
    assert item.evaluations == (("groundedness", "fail"),)

    page = review_detector(sidecar).page
    assert page is not None
    form = urllib.parse.urlencode({"supported": "partly", "reason": "wrong"}).encode()
    answer = urllib.request.Request(
        f"http://127.0.0.1:{page.port}/review/{trace_id}",
        data=form,
        headers={**AUTH, "Content-Type": "application/x-www-form-urlencoded"},
    )
    with urllib.request.urlopen(answer, timeout=10) as response:  # follows the 303
        assert response.status == 200
    agreement = "rag_review_evaluation_agreement_total"
    fail_partly = {"evaluation": "groundedness", "outcome": "fail", "human": "partly"}
    assert sample(registry, agreement, **fail_partly) == 1
    assert sample(registry, agreement) == 1
    assert sample(registry, "rag_evaluation_results_total", outcome="fail") == 2

    out = tmp_path / "review.md"
    write_report(store.reviewed(), out)
    assert "| groundedness | 1 | 0 | 0 | 0 | 1 | 100.0% | 100.0% | 100.0% | 0 |" in out.read_text()


@pytest.mark.parametrize("partitions", [2])
def test_two_replicas_share_one_queue_through_kafka(
    broker: Broker,
    start_sidecar: StartSidecar,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    partitions: int,
) -> None:
    """An item sampled by replica A appears in replica B's store with its evaluation
    outcome; a verdict recorded on B marks it reviewed on A, and its evaluation agreement
    counts on B alone (the counters sum over replicas). Both topics carry the documented
    JSON records."""
    monkeypatch.setenv("REVIEW_TEST_TOKEN", TOKEN)
    topic = unique("review")
    broker.create_topic(topic, partitions)
    broker.create_topic(f"{topic}-verdicts", partitions)
    traces = broker.create_topic(unique("traces"))

    def replica(name: str) -> Sidecar:
        settings = review_settings(tmp_path / name, score=False, random_rate=1.0, topic=topic)
        settings["detectors"]["evaluations"] = EVALUATIONS
        settings["collectors"] = {"kafka": kafka_settings(broker.bootstrap, [traces])}
        return start_sidecar(**settings)

    a, b = replica("a"), replica("b")
    base, extra = request(0, "s", "what is it?")
    extra.update(_annotations(("groundedness", 0.9)))
    [trace_id] = send(a, [(base, extra)])
    on_b, store_a, store_b = review_detector(b), store_of(a), store_of(b)
    wait_until(lambda: store_b.get(trace_id) is not None, timeout=60)
    item = store_b.get(trace_id)
    assert item is not None
    assert item.strata == ("random",)
    assert item.evaluations == (("groundedness", "pass"),)
    assert store_a.next_unreviewed() is not None

    verdict = Verdict(trace_id, "partly", relevant_doc_ids=("d2",), reason="incomplete")
    assert store_b.record(verdict) is not None
    on_b.on_verdict(item, verdict)
    wait_until(lambda: store_a.reviewed() != [], timeout=60)
    [(_, seen)] = store_a.reviewed()
    assert (seen.supported, seen.reason, seen.relevant_doc_ids) == ("partly", "incomplete", ("d2",))
    assert store_a.next_unreviewed() is None
    agreement = "rag_review_evaluation_agreement_total"
    assert sample(b.registry, agreement, evaluation="groundedness", outcome="pass") == 1
    assert sample(a.registry, agreement) == 0

    [record] = [orjson.loads(r.value) for r in broker.read(topic)]
    assert (record["schema"], record["trace_id"]) == ("rag-review/1", trace_id)
    assert record["evaluations"] == {"groundedness": "pass"}
    [verdict_record] = [orjson.loads(r.value) for r in broker.read(f"{topic}-verdicts")]
    assert verdict_record["schema"] == "rag-review-verdict/1"
