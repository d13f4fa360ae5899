"""Conformance: splunk-otel-util-genai (from PyPI, in its own venv: it needs
opentelemetry-api 1.39, rag-monitor pins newer) emits gen_ai.evaluation.result through its
EvaluationEventsEmitter, as OTLP/HTTP log records and as span events on the requests,
into a running sidecar: every result it sent is counted per evaluation, outcome and
variant, joined to its request."""

from __future__ import annotations

import json
import subprocess
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from detectors.evaluations.names import RESULTS_TOTAL, UNMATCHED_TOTAL
from monitor.runtime.sidecar import Sidecar
from tests.conformance.conftest import pinned_venv
from tests.conftest import sample, wait_until

pytestmark = pytest.mark.integration

PRODUCER = Path(__file__).with_name("genai_evaluations_producer.py")
# The library and everything it runs on, pinned exactly (pip freeze of a working venv).
PACKAGES = (
    "splunk-otel-util-genai==0.1.15",
    "opentelemetry-api==1.39.1",
    "opentelemetry-sdk==1.39.1",
    "opentelemetry-exporter-otlp-proto-http==1.39.1",
    "opentelemetry-exporter-otlp-proto-common==1.39.1",
    "opentelemetry-proto==1.39.1",
    "opentelemetry-instrumentation==0.60b1",
    "opentelemetry-semantic-conventions==0.60b1",
    "protobuf==6.33.6",
    "googleapis-common-protos==1.76.0",
    "requests==2.34.2",
    "wrapt==1.17.3",
)
REQUESTS = 24
# The names the library sends (it renames answer_relevancy and faithfulness before emitting).
EVALUATIONS = {"evaluations": {"relevance": {"score_min": 0.7},
                               "hallucination": {"labels": ["factual"]}}}  # fmt: skip


@pytest.fixture(scope="session")
def producer_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The python of a venv holding the pinned producer library (built once a session)."""
    return pinned_venv(tmp_path_factory.mktemp("genai-producer") / "venv", PACKAGES)


def expected_outcome(attributes: dict[str, object]) -> str:
    """The outcome the configured rules give a result with these attributes."""
    if "error.type" in attributes:
        return "error"
    if attributes["gen_ai.evaluation.name"] == "relevance":
        score = attributes["gen_ai.evaluation.score.value"]
        assert isinstance(score, float)
        return "pass" if score >= 0.7 else "fail"
    return "pass" if attributes["gen_ai.evaluation.score.label"] == "factual" else "fail"


def test_library_results_over_logs_and_span_events_count_per_evaluation_outcome_and_variant(
    producer_python: Path, start_sidecar: Callable[..., Sidecar], tmp_path: Path
) -> None:
    """24 requests (a quarter canary), each judged for relevancy and faithfulness (every
    fifth with a failed judge too), as log records (even requests) or span events (odd):
    the counts per evaluation, outcome and variant equal what the library sent, none
    unmatched."""
    sidecar = start_sidecar(detectors={"evaluations": EVALUATIONS,
                                       "faithfulness": {"enabled": False}},
                            collectors={"otlp": {"grpc": {"enabled": False}},
                                        "spans": {"assembly": {"grace_s": 0.5}}})  # fmt: skip
    registry = sidecar.registry
    base = f"http://127.0.0.1:{sidecar.http.port}"  # type: ignore[union-attr]
    producer = subprocess.Popen([str(producer_python), str(PRODUCER), base, str(REQUESTS)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                cwd=tmp_path)  # fmt: skip
    assert producer.stdin is not None
    assert producer.stdout is not None
    try:
        assert producer.stdout.readline().strip() == "spans sent"
        # the log records follow their requests, as an evaluator running after the answer does
        wait_until(lambda: sample(registry, "rag_requests_total") >= REQUESTS)
        output, _ = producer.communicate("go\n", timeout=60)
    finally:
        producer.kill()
    assert producer.returncode == 0
    sent = [json.loads(line) for line in output.splitlines()]

    # the root spans' rag.variant, as the producer sets it: every fourth request canary
    by_response = {f"resp-{index}": "canary" if index % 4 == 3 else "production"
                   for index in range(REQUESTS)}  # fmt: skip
    expected = Counter(
        (item["attributes"]["gen_ai.evaluation.name"], expected_outcome(item["attributes"]),
         by_response[item["attributes"]["gen_ai.response.id"]])
        for item in sent
    )  # fmt: skip
    # the library's renames and its filter: coherence is never emitted
    assert {name for name, _, _ in expected} == {"relevance", "hallucination"}
    assert {item["carrier"] for item in sent} == {"logs", "span_events"}
    assert len({item["trace_id"] for item in sent}) == REQUESTS
    assert {outcome for _, outcome, _ in expected} == {"pass", "fail", "error"}

    def counted() -> Counter[tuple[str, str, str]]:
        return Counter({key: int(sample(registry, RESULTS_TOTAL, evaluation=key[0],
                                        outcome=key[1], variant=key[2]))
                        for key in expected})  # fmt: skip

    wait_until(lambda: counted() == expected, timeout=30)
    # nothing else counted: no result folded, unnamed or counted twice
    assert sample(registry, RESULTS_TOTAL) == len(sent)
    assert sample(registry, UNMATCHED_TOTAL) == 0
