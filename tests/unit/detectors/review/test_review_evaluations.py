"""The review loop's calibration of evaluations: pass rules, outcomes carried on items,
agreement counted per evaluation on a verdict, and the report's agreement table."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from detectors.evaluations.config import EvaluationRule
from detectors.review.calibration import evaluation_agreements
from detectors.review.config import ReviewConfig
from detectors.review.detector import ReviewDetector
from detectors.review.metrics import ReviewMetrics
from detectors.review.model import (
    MAX_ITEM_EVALUATIONS,
    EvaluationOutcome,
    ReviewItem,
    Stratum,
    Supported,
    Verdict,
    with_evaluation,
)
from detectors.review.report import build_report, render_html, render_markdown, summary
from detectors.review.sampler import Action, AttachEvaluation, Enqueue, ReviewSampler
from detectors.review.store import ReviewStore, item_from_record, item_record
from monitor.contract.components import BuildContext, load_components
from monitor.contract.detector import Detector
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.service_config import ServiceConfig
from monitor.contract.shared import COMPARED_WITH_REVIEW, PassRules, SharedValues
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import EvaluationResult, RagTrace
from monitor.runtime.sidecar import build_detectors
from tests.conftest import make_config, sample, wait_until

AGREEMENT = "rag_review_evaluation_agreement_total"
S, U = "supported", "unsupported"
TRACE = f"{1:032x}"
RULES: PassRules = {
    "groundedness": EvaluationRule(score_min=0.5, compare_with_review=True).passes,
    "hallucination": EvaluationRule(labels=["factual"], compare_with_review=True).passes,
}


def result(name: str | None = "groundedness", **fields: Any) -> EvaluationResult:
    return EvaluationResult(name=name, **fields)


@pytest.mark.parametrize(
    ("rule", "given", "passes"),
    [
        ({"score_min": 0.7}, {"score": 0.7}, True),
        ({"score_min": 0.7}, {"score": 0.69}, False),
        ({"score_max": 0.2}, {"score": 0.3}, False),
        ({"score_max": 0.2}, {"score": 0.2}, True),
        ({"labels": ["factual"]}, {"label": "factual"}, True),
        ({"labels": ["factual"]}, {"label": "hallucinated"}, False),
        ({"labels": ["factual"]}, {"score": 1.0}, None),
        ({"score_min": 0.7}, {"label": "factual"}, None),
        ({"score_min": 0.7}, {"score": 0.9, "error_type": "timeout"}, None),
    ],
    ids=[
        "at-min",
        "under-min",
        "over-max",
        "at-max",
        "label-in",
        "label-out",
        "no-label",
        "no-score",
        "producer-error",
    ],
)
def test_pass_rule_judges_a_result(
    rule: dict[str, Any], given: dict[str, Any], passes: bool | None
) -> None:
    """A rule says pass, fail, or cannot judge (None) as its score, label or error reads."""
    assert EvaluationRule.model_validate(rule).passes(result(**given)) is passes


# --- the sampler: outcomes on items ----------------------------------------------------------


def make_sampler() -> tuple[ReviewSampler, list[Action]]:
    config = ReviewConfig.model_validate({"enabled": True, "random_rate": 1.0})
    taken: list[Action] = []

    def sink(action: Action) -> bool:
        taken.append(action)
        return True

    sampler = ReviewSampler(config, ReviewMetrics(SidecarRegistry()), sink, rules=RULES)
    return sampler, taken


def trace(index: int, *evaluations: EvaluationResult) -> RagTrace:
    return RagTrace(
        trace_id=f"{index:032x}",
        time=datetime.fromtimestamp(1_700_000_000 + index, tz=UTC),
        source="otlp",
        query="q",
        answer="a",
        evaluations=evaluations,
    )


def test_an_item_carries_the_outcomes_of_evaluations_compared_with_review() -> None:
    """Results in the trace become outcomes for compared evaluations only; a result the rule
    cannot judge, an evaluation not compared and a nameless result are left out."""
    sampler, taken = make_sampler()
    sampler.observe(
        trace(
            1,
            result(score=0.2),
            result("hallucination", score=0.9),  # the rule reads labels: not judged
            result("answer_relevancy", score=0.1),
            result(None, score=0.1),
        )
    )
    [enqueued] = taken
    assert isinstance(enqueued, Enqueue)
    assert enqueued.item.evaluations == (("groundedness", "fail"),)


def test_a_result_sent_later_is_attached_by_trace_id() -> None:
    """A later result naming a queued trace becomes an attach action (a later one for the
    same evaluation replaces it); one naming only a response id, or another trace, is not."""
    sampler, taken = make_sampler()
    sampler.observe(trace(1))
    sampler.observe_event(result("hallucination", label="factual", trace_id=TRACE))
    sampler.observe_event(result("hallucination", label="invented", response_id="r1"))
    sampler.observe_event(result(score=0.9, trace_id=f"{2:032x}"))
    assert taken[1:] == [AttachEvaluation(TRACE, "hallucination", "pass")]


def test_outcomes_round_trip_merge_and_attach_in_the_store(tmp_path: Path) -> None:
    """Outcomes survive the JSON record; an item queued again (or read again from Kafka)
    adds its names and replaces held outcomes; attaching replaces one evaluation's outcome."""
    item = ReviewItem(TRACE, 1.0, "q", "a", evaluations=(("groundedness", "pass"),))
    assert item_from_record(item_record(item)) == item
    store = ReviewStore(tmp_path)
    try:
        store.add(item)
        store.add(ReviewItem(TRACE, 1.0, "q", "a", evaluations=(("hallucination", "fail"),)))
        store.add(ReviewItem(TRACE, 1.0, "q", "a"))  # a record without outcomes keeps them
        held = store.get(TRACE)
        assert held is not None
        assert dict(held.evaluations) == {"groundedness": "pass", "hallucination": "fail"}
        store.add(ReviewItem(TRACE, 1.0, "q", "a", evaluations=(("groundedness", "fail"),)))
        store.attach_evaluation(TRACE, "hallucination", "pass")
        held = store.get(TRACE)
        assert held is not None
        assert dict(held.evaluations) == {"groundedness": "fail", "hallucination": "pass"}
    finally:
        store.close()


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        (None, ()),
        ({"a": "pass", "b": "error", "c": 1}, (("a", "pass"),)),
        ({f"e{i}": "fail" for i in range(100)}, tuple((f"e{i}", "fail") for i in range(64))),
    ],
    ids=["absent", "unknown-outcomes", "too-many"],
)
def test_a_record_from_another_replica_is_bounded(
    given: dict[str, Any] | None, kept: tuple[tuple[str, str], ...]
) -> None:
    """A record without outcomes reads as none; outcomes other than pass or fail are left
    out, and no more than MAX_ITEM_EVALUATIONS are kept."""
    record = item_record(ReviewItem(TRACE, 1.0, "q", "a"))
    if given is None:
        del record["evaluations"]
    else:
        record["evaluations"] = given
    assert item_from_record(record).evaluations == kept
    assert len(kept) <= MAX_ITEM_EVALUATIONS


def test_a_record_whose_outcomes_are_no_object_is_refused() -> None:
    """An ``evaluations`` value that is not an object raises what the Kafka reader counts as
    invalid."""
    record = {**item_record(ReviewItem(TRACE, 1.0, "q", "a")), "evaluations": ["pass"]}
    with pytest.raises(TypeError):
        item_from_record(record)


def test_a_new_name_beyond_the_bound_is_left_out() -> None:
    """``with_evaluation`` replaces a held name's outcome but adds no name past the bound."""
    full = ReviewItem(TRACE, 1.0, "q", "a", evaluations=tuple((f"e{i}", "pass") for i in range(64)))
    assert with_evaluation(full, "late", "fail") == full
    assert dict(with_evaluation(full, "e0", "fail").evaluations)["e0"] == "fail"


# --- the verdict: the counter -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("evaluations", "human", "counted"),
    [
        ((("groundedness", "fail"),), "no", {("groundedness", "fail", "no"): 1}),
        ((("groundedness", "pass"),), "partly", {("groundedness", "pass", "partly"): 1}),
        (
            (("groundedness", "pass"), ("hallucination", "fail")),
            "yes",
            {("groundedness", "pass", "yes"): 1, ("hallucination", "fail", "yes"): 1},
        ),
        ((("from_another_replica", "fail"),), "no_claim", {("other", "fail", "no_claim"): 1}),
        ((), "no", {}),
    ],
    ids=["fail-no", "pass-partly", "two-evaluations", "not-compared-here", "none"],
)
def test_a_verdict_counts_agreement_per_evaluation(
    tmp_path: Path,
    evaluations: tuple[tuple[str, Any], ...],
    human: Supported,
    counted: dict[tuple[str, str, str], int],
) -> None:
    """Each outcome on the reviewed item counts once under its evaluation (other when this
    replica does not compare it), its outcome and the reviewer's raw verdict."""
    registry = SidecarRegistry()
    config = ReviewConfig.model_validate({"enabled": True, "http": {"enabled": False}})
    detector = ReviewDetector(config, registry, tmp_path, rules=RULES)
    item = ReviewItem(TRACE, 1.0, "q", "a", evaluations=evaluations)
    detector.on_verdict(item, Verdict(TRACE, human))
    found = {
        (s.labels["evaluation"], s.labels["outcome"], s.labels["human"]): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == AGREEMENT and s.value  # every cell of a compared name exists, at 0
    }
    assert found == counted
    assert sample(registry, AGREEMENT, stratum="random") == 0  # the item was not drawn at random
    assert sample(registry, "rag_review_judge_agreement_total") == 0  # HHEM did not score it


@pytest.mark.parametrize(
    ("strata", "stratum"),
    [
        (("random",), "random"),
        (("thumbs_down", "random"), "random"),
        (("thumbs_down",), "other"),
        (("low_faithfulness", "follow_up"), "other"),
    ],
    ids=["random", "random-and-thumbs-down", "thumbs-down", "oversampled"],
)
def test_a_verdict_counts_under_the_random_stratum_when_the_item_was_drawn_at_random(
    tmp_path: Path, strata: tuple[Stratum, ...], stratum: str
) -> None:
    """An item drawn at random counts under stratum random, whatever else took it too; an
    item only oversampled (thumbs-down, low score, follow-up) under other: only the random
    ones estimate the population's pass share."""
    registry = SidecarRegistry()
    config = ReviewConfig.model_validate({"enabled": True, "http": {"enabled": False}})
    detector = ReviewDetector(config, registry, tmp_path, rules=RULES)
    item = ReviewItem(
        TRACE, 1.0, "q", "a", strata=strata, hhem_score=0.9, hhem_threshold=0.5,
        evaluations=(("groundedness", "fail"),),
    )  # fmt: skip
    detector.on_verdict(item, Verdict(TRACE, "yes"))
    judge = "rag_review_judge_agreement_total"
    assert sample(registry, judge, stratum=stratum, hhem="supported", human="yes") == 1
    assert sample(registry, judge) == 1
    assert sample(registry, AGREEMENT, stratum=stratum, evaluation="groundedness") == 1
    assert sample(registry, AGREEMENT) == 1


def test_the_component_compares_only_evaluations_set_compare_with_review(tmp_path: Path) -> None:
    """Built from the whole config, the review detector judges the results of evaluations
    set compare_with_review by their own pass rules, and no others."""
    config = make_config(
        service={"state_dir": str(tmp_path)},
        detectors={
            "review": {"enabled": True, "random_rate": 1.0, "http": {"enabled": False}},
            "evaluations": {
                "evaluations": {
                    "groundedness": {"score_min": 0.5, "compare_with_review": True},
                    "answer_relevancy": {"score_min": 0.7},
                }
            },
        },
    )
    [detector] = [d for d in build_detectors(config, SidecarRegistry()) if d.name == "review"]
    observed = trace(1, result(score=0.4), result("answer_relevancy", score=0.1))
    assert held_outcomes(detector, observed) == (("groundedness", "fail"),)


def held_outcomes(
    detector: Detector, observed: RagTrace
) -> tuple[tuple[str, EvaluationOutcome], ...]:
    """The evaluation outcomes the review ``detector`` keeps with ``observed`` in its queue."""
    assert isinstance(detector, ReviewDetector)
    detector.start()
    try:
        detector.observe(observed)
        store = detector.store
        assert store is not None
        wait_until(lambda: store.get(observed.trace_id) is not None)
        held = store.get(observed.trace_id)
        assert held is not None
        return held.evaluations
    finally:
        detector.shutdown()


def test_the_review_component_takes_the_rules_the_core_hands_it(tmp_path: Path) -> None:
    """Built with no evaluations section anywhere, the review component judges results by
    the pass rules BuildContext.shared hands it (monitor.contract.shared), not by a section it reads."""
    [review] = [component for component in load_components() if component.name == "review"]
    shared = SharedValues([COMPARED_WITH_REVIEW.provide({"groundedness": RULES["groundedness"]})])
    context = BuildContext(
        SidecarRegistry(), ServiceConfig(state_dir=tmp_path), GuardrailsConfig(), shared
    )
    config = ReviewConfig.model_validate(
        {"enabled": True, "random_rate": 1.0, "http": {"enabled": False}}
    )
    observed = trace(1, result(score=0.6), result("hallucination", label="factual"))
    assert held_outcomes(review.build(config, context), observed) == (("groundedness", "pass"),)


# --- the report ------------------------------------------------------------------------------


def reviewed(*pairs: tuple[str, EvaluationOutcome, Supported]) -> list[tuple[ReviewItem, Verdict]]:
    """One reviewed item per (evaluation, outcome, human verdict)."""
    return [
        (
            ReviewItem(f"{i:032x}", 1.0, "q", "a", evaluations=((name, outcome),)),
            Verdict(f"{i:032x}", human),
        )
        for i, (name, outcome, human) in enumerate(pairs)
    ]


def test_agreement_precision_and_recall_equal_the_hand_count() -> None:
    """Per evaluation: pass is supported, fail unsupported; partly counts as unsupported and
    no_claim is left out, as for a judge."""
    pairs = reviewed(
        ("groundedness", "fail", "no"),
        ("groundedness", "fail", "partly"),
        ("groundedness", "fail", "yes"),
        ("groundedness", "pass", "yes"),
        ("groundedness", "pass", "yes"),
        ("groundedness", "pass", "no"),
        ("groundedness", "pass", "no_claim"),
        ("hallucination", "pass", "yes"),
    )
    grounded, hallucination = evaluation_agreements(pairs)
    assert grounded.evaluation == "groundedness"
    assert grounded.matrix == {(U, U): 2, (U, S): 1, (S, S): 2, (S, U): 1}
    assert (grounded.n, grounded.no_claim, grounded.partly) == (6, 1, 1)
    assert grounded.agreement == pytest.approx(4 / 6)
    assert grounded.precision == pytest.approx(2 / 3)
    assert grounded.recall == pytest.approx(2 / 3)
    assert (hallucination.n, hallucination.agreement, hallucination.precision) == (1, 1.0, None)


HTML_ROW = "".join(
    f"<td>{c}</td>" for c in ("groundedness", 2, 0, 1, 0, 1, "50.0%", "100.0%", "50.0%", 0)
)
MARKDOWN_ROW = "| groundedness | 2 | 0 | 1 | 0 | 1 | 50.0% | 100.0% | 50.0% | 0 |"


@pytest.mark.parametrize(
    ("render", "row"),
    [(render_html, HTML_ROW), (render_markdown, MARKDOWN_ROW)],
    ids=["html", "markdown"],
)
def test_report_shows_agreement_per_evaluation_escaped(render: Any, row: str) -> None:
    """The report's agreement table holds each evaluation's counts and shares; a name from
    a record (another replica's) is escaped like any other string."""
    pairs = reviewed(
        ("groundedness", "fail", "no"),
        ("groundedness", "pass", "no"),
        ("<script>alert(1)</script>", "pass", "yes"),
    )
    report = build_report(pairs, now=1_700_000_000.0)
    text = render(report)
    assert "Evaluation agreement with reviewers" in text
    assert row in text
    assert "<script>" not in text
    assert "&lt;script&gt;" in text
    assert "groundedness agreement 50.0% on 2" in summary(report)
