"""The evaluations detector: pass rules, bounded labels, joins of late results, bad input."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from detectors.evaluations.alerting import guardrails_of, rows, rules
from detectors.evaluations.config import EvaluationRule, EvaluationsConfig
from detectors.evaluations.detector import EvaluationsDetector, outcome
from detectors.evaluations.names import FOLDED_TOTAL, RESULTS_TOTAL, SCORE, UNMATCHED_TOTAL
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import EvaluationResult, RagTrace

CONFIG = EvaluationsConfig.model_validate(
    {
        "evaluations": {
            "answer_relevancy": {"score_min": 0.7},
            "toxicity": {"score_max": 0.2, "severity": "ticket", "min_pass_share": 0.99},
            "hallucination": {"labels": ["factual"]},
        }
    }
)


def trace(trace_id: str, *results: EvaluationResult, variant: str | None = None) -> RagTrace:
    return RagTrace(trace_id, datetime(2026, 1, 5, tzinfo=UTC), "otlp", evaluations=results,
                    variant=variant)  # fmt: skip


def count(
    registry: SidecarRegistry, evaluation: str, result: str, variant: str = "production"
) -> float:
    labels = {"evaluation": evaluation, "outcome": result, "variant": variant}
    return registry.get_sample_value(RESULTS_TOTAL, labels) or 0.0


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (EvaluationResult("answer_relevancy", score=0.7), "pass"),
        (EvaluationResult("answer_relevancy", score=0.69), "fail"),
        (EvaluationResult("answer_relevancy", score=None), "error"),
        (EvaluationResult("answer_relevancy", score=math.nan), "error"),
        (EvaluationResult("answer_relevancy", score=0.9, error_type="timeout"), "error"),
        (EvaluationResult("toxicity", score=0.2), "pass"),
        (EvaluationResult("toxicity", score=0.21), "fail"),
        (EvaluationResult("hallucination", label="factual"), "pass"),
        (EvaluationResult("hallucination", label="hallucinated", score=1.0), "fail"),
        (EvaluationResult("hallucination", score=1.0), "error"),
        (EvaluationResult(None, score=1.0), "error"),
    ],
    ids=["at-min", "under-min", "no-score", "nan", "error-type", "at-max", "over-max",
         "label-in", "label-out", "no-label", "no-name"],
)  # fmt: skip
def test_outcome_follows_the_pass_rule(result: EvaluationResult, expected: str) -> None:
    """score_min, score_max and labels decide pass or fail; what they cannot judge is error."""
    assert outcome(result, CONFIG.rule(result.name or "")) == expected


def test_results_in_traces_count_per_evaluation_outcome_and_variant() -> None:
    """Results inside a trace count under its variant; finite scores fill the histogram."""
    registry = SidecarRegistry()
    detector = EvaluationsDetector(CONFIG, registry)
    detector.observe(trace("a1", EvaluationResult("answer_relevancy", score=0.9),
                           EvaluationResult("toxicity", score=0.5)))  # fmt: skip
    detector.observe(trace("a2", EvaluationResult("answer_relevancy", score=0.1), variant="shadow"))
    assert count(registry, "answer_relevancy", "pass") == 1
    assert count(registry, "toxicity", "fail") == 1
    assert count(registry, "answer_relevancy", "fail", "shadow") == 1
    assert registry.get_sample_value(f"{SCORE}_count", {"evaluation": "answer_relevancy"}) == 2


def test_late_results_join_their_request_by_trace_or_response_id() -> None:
    """A result sent after its request counts under that request's variant; one naming
    no recent request counts under production and as unmatched."""
    registry = SidecarRegistry()
    detector = EvaluationsDetector(CONFIG, registry)
    detector.observe(trace("b1", EvaluationResult("hallucination", label="factual",
                                                  response_id="resp-7"), variant="canary"))  # fmt: skip
    detector.observe_event(EvaluationResult("answer_relevancy", score=0.2, trace_id="b1"))
    detector.observe_event(EvaluationResult("answer_relevancy", score=0.9, response_id="resp-7"))
    detector.observe_event(EvaluationResult("answer_relevancy", score=0.9, trace_id="ff"))
    assert count(registry, "answer_relevancy", "fail", "canary") == 1
    assert count(registry, "answer_relevancy", "pass", "canary") == 1
    assert count(registry, "answer_relevancy", "pass") == 1
    assert registry.get_sample_value(UNMATCHED_TOTAL) == 1


def test_ten_thousand_names_fold_into_other_and_the_map_stays_bounded() -> None:
    """Unconfigured names count as other, nameless ones as none; series and the join map
    stay bounded whatever arrives."""
    registry = SidecarRegistry()
    config = CONFIG.model_copy(update={"max_tracked_traces": 100})
    detector = EvaluationsDetector(config, registry)
    for i in range(10_000):
        detector.observe(trace(f"{i:x}", EvaluationResult(f"metric_{i}", score=math.inf),
                               EvaluationResult(None)))  # fmt: skip
    assert count(registry, "other", "error") == 10_000
    assert count(registry, "none", "error") == 10_000
    assert registry.get_sample_value(FOLDED_TOTAL) == 10_000
    series = {
        tuple(sorted(s.labels.items()))
        for metric in registry.collect()
        if metric.name == RESULTS_TOTAL.removesuffix("_total")
        for s in metric.samples
    }
    assert len(series) <= 2 * (len(CONFIG.evaluations) + 2) * 3  # _total and _created
    assert len(detector._variants) == 100


@pytest.mark.parametrize(
    "rule",
    [{}, {"score_min": 0.5, "labels": ["ok"]}, {"score_min": 0.5, "min_pass_share": 1.5}],
    ids=["no-rule", "two-rules", "share-over-one"],
)
def test_bad_evaluation_rules_are_refused(rule: dict[str, object]) -> None:
    """An evaluation needs exactly one pass rule and a share within (0, 1)."""
    with pytest.raises(ValidationError):
        EvaluationRule.model_validate(rule)


def test_reserved_or_bad_names_are_refused() -> None:
    """other and none are the fold words; a name must be a label value."""
    for name in ("other", "none", "has space"):
        with pytest.raises(ValidationError):
            EvaluationsConfig.model_validate({"evaluations": {name: {"score_min": 0.5}}})


def test_each_distinct_guardrail_gets_its_own_rule() -> None:
    """The section's defaults take every name but those with their own share or
    severity; a ticket evaluation gets a ticket bound and alert; the judge-bias ticket
    comes last."""
    assert guardrails_of(CONFIG) == {
        (0.9, "page"): 'evaluation!~"other|none|toxicity"',
        (0.99, "ticket"): 'evaluation=~"toxicity"',
    }
    fragment = rules(CONFIG, GuardrailsConfig())
    alerts = [(a["alert"], a["labels"]["severity"]) for a in fragment.alerting]
    assert alerts == [
        *[("RagEvaluationFailing", "page")] * 2,
        *[("RagEvaluationFailing", "ticket")] * 2,
        ("RagJudgeBiased", "ticket"),
    ]
    records = {r["record"] for r in fragment.recording}
    assert "rag:evaluation_pass:upper_bound_ticket30m" in records
    evidence = rows(CONFIG, GuardrailsConfig())[0].panels[1]
    assert ("1 * sum(increase(rag_requests_total{job=~\"$job\", variant=~\"$variant\"}[30m]))",
            "answer_relevancy expected in 30m") in evidence.queries  # fmt: skip
