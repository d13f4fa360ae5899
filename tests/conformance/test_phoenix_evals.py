"""Conformance: arize-phoenix-evals (from PyPI) judges a RAG app's answers online; its own
tracing writes each verdict as an OpenInference EVALUATOR span below the request, which
arize-phoenix-otel exports over OTLP/HTTP into a running sidecar: every verdict is counted
per evaluation, outcome and variant, joined to its request, and a judge that raised is
counted as an error. The judge's model is the fake OpenAI endpoint (the network
boundary); the evaluators, the LLM wrapper, the tracing and the exporter are the
library's."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from detectors.evaluations.names import RESULTS_TOTAL, UNMATCHED_TOTAL
from tests.conformance.conftest import Conformance
from tests.conformance.fake_openai import FakeOpenAI

pytestmark = pytest.mark.integration

PRODUCER = Path(__file__).with_name("phoenix_evals_producer.py")
REQUESTS = 20
RULES: dict[str, dict[str, Any]] = {
    "relevance": {"labels": ["relevant"]},
    "has_citation": {"score_min": 1.0},
}
SIDECAR = {"detectors": {"evaluations": {"evaluations": RULES}}}


def judge(prompt: str) -> dict[str, str]:
    """The fake judge model's classification: a garbled answer gets a label outside the
    evaluator's choices (the library then raises), the weather answer is unrelated."""
    if "garbled" in prompt:
        return {"label": "perhaps", "explanation": "cannot tell"}
    if "weather" in prompt:
        return {"label": "unrelated", "explanation": "off topic"}
    return {"label": "relevant", "explanation": "answers the question"}


def expected_key(verdict: dict[str, Any]) -> tuple[str, str, str]:
    """(evaluation, outcome, variant) the configured rules give one of the library's verdicts."""
    variant = "canary" if verdict["request"] % 4 == 3 else "production"
    if "error" in verdict:
        return "none", "error", variant
    score = verdict["score"]
    if score["name"] == "relevance":
        passed = score["label"] in RULES["relevance"]["labels"]
    else:
        passed = score["score"] >= RULES["has_citation"]["score_min"]
    return score["name"], "pass" if passed else "fail", variant


@pytest.mark.parametrize("conformance", [SIDECAR], indirect=True, ids=["evaluations"])
def test_evaluator_spans_count_per_evaluation_outcome_and_variant_joined_to_their_requests(
    conformance: Conformance, fake_openai: FakeOpenAI, tmp_path: Path
) -> None:
    """20 requests (a quarter canary), each judged by an LLM relevance classifier (every
    fifth raising on a label outside its choices) and a code citation check: the counts per
    evaluation, outcome and variant equal the library's verdicts, each on its request."""
    fake_openai.judge = judge
    base = f"http://127.0.0.1:{conformance.sidecar.http.port}"  # type: ignore[union-attr]
    run = subprocess.run(
        [sys.executable, str(PRODUCER), base, fake_openai.base_url, str(REQUESTS)],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    verdicts = [json.loads(line) for line in run.stdout.splitlines()]
    traces = conformance.traces(REQUESTS)

    # the evaluators' spans and their judge's LLM calls made no request and no answer of their own
    assert len(traces) == REQUESTS
    answers = {trace.trace_id: trace.answer for trace in traces}
    assert all(answer and "label" not in answer for answer in answers.values())
    # each verdict on its request: the trace the library itself names in the score's metadata
    by_trace: dict[str, Counter[tuple[Any, ...]]] = {trace_id: Counter() for trace_id in answers}
    for verdict in verdicts:
        score = verdict.get("score")
        if score is None:
            by_trace[verdict["trace_id"]][(None, None, None, verdict["error"])] += 1
        else:
            assert score["metadata"]["trace_id"] == verdict["trace_id"]
            by_trace[verdict["trace_id"]][(score["name"], score["score"], score.get("label"),
                                           None)] += 1  # fmt: skip
    assert {trace.trace_id: Counter((result.name, result.score, result.label, result.error_type)
                                    for result in trace.evaluations)
            for trace in traces} == by_trace  # fmt: skip

    expected = Counter(expected_key(verdict) for verdict in verdicts)
    # every evaluation and outcome is exercised, canary and production
    assert {(name, outcome) for name, outcome, _ in expected} == {
        ("relevance", "pass"), ("relevance", "fail"), ("has_citation", "pass"),
        ("has_citation", "fail"), ("none", "error"),
    }  # fmt: skip
    assert {variant for _, _, variant in expected} == {"canary", "production"}
    counted = Counter({key: int(conformance.metric(RESULTS_TOTAL, evaluation=key[0],
                                                   outcome=key[1], variant=key[2]))
                       for key in expected})  # fmt: skip
    assert counted == expected
    # nothing else counted: no verdict missed, folded or counted twice
    assert conformance.metric(RESULTS_TOTAL) == len(verdicts)
    assert conformance.metric(UNMATCHED_TOTAL) == 0
