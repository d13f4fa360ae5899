"""Guardrails by slice: which slices a trace is in, and each guardrail's detector counting
its production verdicts by them (monitor/contract/slicing.py)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from detectors.cost.config import CostConfig
from detectors.cost.detector import CostDetector
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.detector import FaithfulnessDetector
from detectors.faithfulness.remote import pair_record
from detectors.faithfulness.scorer import Pair
from detectors.faithfulness.worker import Evaluation
from detectors.filter_exclusion.config import FilterExclusionConfig
from detectors.filter_exclusion.detector import FilterExclusionDetector
from detectors.latency.config import LatencyConfig
from detectors.latency.detector import LatencyDetector
from detectors.review.config import ReviewConfig
from detectors.review.detector import ReviewDetector
from detectors.review.model import Verdict
from detectors.review.sampler import item_of
from detectors.review.store import item_from_record, item_record
from detectors.slices.config import SlicesConfig
from monitor.contract.config import Config, shared_values
from monitor.contract.names import (
    SLICE_COST_REQUESTS_TOTAL,
    SLICE_COST_USD_TOTAL,
    SLICE_EXCLUSION_QUERIES_TOTAL,
    SLICE_FAITHFULNESS_BELOW_TOTAL,
    SLICE_FAITHFULNESS_SCORED_TOTAL,
    SLICE_FALSE_EXCLUSIONS_TOTAL,
    SLICE_JUDGE_AGREEMENT_TOTAL,
    SLICE_LATENCY_REQUESTS_TOTAL,
    SLICE_LATENCY_SLOW_TOTAL,
)
from monitor.contract.sampler import Sampled
from monitor.contract.shared import SLICER
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import Slicer
from monitor.contract.trace import Context, Label, RagTrace, Usage
from tests.conftest import sample

T0 = datetime(2026, 12, 7, 9, 0, tzinfo=UTC)
PDF, HTML = "application/pdf", "text/html"
SLICER_4 = SlicesConfig(intents=["billing", "refunds"], document_types=[PDF, HTML]).slicer()


def trace(trace_id: str, variant: str | None = None, **fields: object) -> RagTrace:
    fields.setdefault("intent", "billing")
    fields.setdefault(
        "contexts",
        (
            Context(doc_id="d1", text="Refunds take 30 days.", metadata={"file_type": PDF}),
            Context(doc_id="d2", text="Refunds need a receipt.", metadata={"file_type": "x"}),
        ),
    )
    return RagTrace(trace_id=trace_id, source="otlp", time=T0, variant=variant, **fields)  # type: ignore[arg-type]


def test_a_trace_is_in_its_bounded_intent_and_each_distinct_document_type() -> None:
    """Intent and document types through their allow-lists: unlisted is other, missing none."""
    assert SLICER_4.of(trace("a1")) == (
        ("intent", "billing"),
        ("document_type", PDF),
        ("document_type", "other"),
    )
    assert SLICER_4.of(trace("a2", intent="spam", contexts=())) == (
        ("intent", "other"),
        ("document_type", "none"),
    )
    assert Slicer().of(trace("a3")) == ()  # the slices detector off: no slice at all
    assert SLICER_4.size == 8


def test_the_slices_detector_provides_its_slicer() -> None:
    """What the guardrails' detectors count by comes from the slices section alone."""
    config = Config.model_validate({"detectors": {"slices": {"intents": ["billing"]}}})
    assert shared_values(config)[SLICER].intents == frozenset({"billing"})
    assert not shared_values(Config())[SLICER].enabled


def test_latency_counts_slow_production_requests_by_slice_and_stage() -> None:
    """Slower than the stage's threshold_s is slow; a shadow request counts in no slice."""
    registry = SidecarRegistry()
    latency = LatencyDetector(
        LatencyConfig(), registry, slo_stages={"total": 1.5, "retrieve": 0.5}, slicer=SLICER_4
    )
    latency.observe(trace("a1", stages={"total": 2.0, "retrieve": 0.2}))
    latency.observe(trace("a2", stages={"total": 1.5}))  # at the bound: within the SLO
    latency.observe(trace("b1", "shadow", stages={"total": 9.0}))
    billing = {"dimension": "intent", "slice": "billing"}
    assert sample(registry, SLICE_LATENCY_REQUESTS_TOTAL, stage="total", **billing) == 2
    assert sample(registry, SLICE_LATENCY_SLOW_TOTAL, stage="total", **billing) == 1
    assert sample(registry, SLICE_LATENCY_REQUESTS_TOTAL, stage="retrieve", **billing) == 1
    assert sample(registry, SLICE_LATENCY_SLOW_TOTAL, stage="retrieve", **billing) == 0
    pdf = {"dimension": "document_type", "slice": PDF}
    assert sample(registry, SLICE_LATENCY_SLOW_TOTAL, stage="total", **pdf) == 1


def test_cost_counts_priced_production_requests_by_slice() -> None:
    registry = SidecarRegistry()
    prices = {"overrides": {"m": {"input_per_mtok": 1_000_000.0}}}  # 1 USD a token
    cost = CostDetector(CostConfig.model_validate(prices), registry, SLICER_4)
    cost.observe(trace("a1", usage=(Usage(model="m", prompt_tokens=2),)))
    cost.observe(trace("a2", intent="refunds", cost_usd=0.5))
    cost.observe(trace("b1", "shadow", usage=(Usage(model="m", prompt_tokens=7),)))
    assert sample(registry, SLICE_COST_USD_TOTAL, dimension="intent", slice="billing") == 2.0
    assert sample(registry, SLICE_COST_USD_TOTAL, dimension="intent", slice="refunds") == 0.5
    assert sample(registry, SLICE_COST_REQUESTS_TOTAL, dimension="document_type", slice=PDF) == 2


def test_false_exclusion_counts_eligible_production_queries_by_slice() -> None:
    registry = SidecarRegistry()
    detector = FilterExclusionDetector(FilterExclusionConfig(), registry, slicer=SLICER_4)
    detector.observe(trace("a1", retrieved=("d1",)))
    detector.observe(trace("a2", intent="refunds", retrieved=(), relevance_excluded=("d1",)))
    detector.observe(trace("b1", "shadow", retrieved=(), relevance_excluded=("d1",)))
    for trace_id in ("a1", "a2", "b1"):
        detector.observe_event(Label(("d1",), trace_id=trace_id))
    queries = {
        value: sample(registry, SLICE_EXCLUSION_QUERIES_TOTAL, dimension="intent", slice=value)
        for value in ("billing", "refunds")
    }
    assert queries == {"billing": 1, "refunds": 1}
    assert sample(registry, SLICE_FALSE_EXCLUSIONS_TOTAL, dimension="intent") == 1
    assert sample(registry, SLICE_FALSE_EXCLUSIONS_TOTAL, slice="refunds") == 1


def test_faithfulness_counts_scored_production_answers_by_slice_and_judge() -> None:
    """Inline: each scored production answer in its slices, below the threshold apart."""
    registry = SidecarRegistry()
    config = FaithfulnessConfig(threshold=0.5)
    detector = FaithfulnessDetector(config, registry, slicer=SLICER_4)  # not started
    detector._record(Evaluation(trace("a1"), "scored", score=0.2))
    detector._record(Evaluation(trace("a2"), "scored", score=0.9))
    detector._record(Evaluation(trace("b1", "shadow"), "scored", score=0.1))
    billing = {"dimension": "intent", "slice": "billing", "judge": detector.judge}
    assert sample(registry, SLICE_FAITHFULNESS_SCORED_TOTAL, **billing) == 2
    assert sample(registry, SLICE_FAITHFULNESS_BELOW_TOTAL, **billing) == 1


def test_a_pair_carries_its_slices_to_the_scorer_which_refuses_unknown_ones() -> None:
    """judge_location kafka: the scorer counts a pair's slices, checked against the same
    allow-lists; a record naming any other slice is not a pair (hostile input)."""
    record = pair_record(Sampled(trace("a1", answer="Refunds take 30 days."), "rate"), "random",
                         SLICER_4)  # fmt: skip
    pair = Pair.from_record(orjson.dumps(record), SLICER_4)
    assert pair.slices == SLICER_4.of(trace("a1"))
    forged = {**record, "slices": [["intent", "<script>alert(1)</script>"]]}
    with pytest.raises(ValueError, match="slice"):
        Pair.from_record(orjson.dumps(forged), SLICER_4)
    with pytest.raises(ValueError, match="slices"):
        Pair.from_record(orjson.dumps({**record, "slices": "intent"}), SLICER_4)
    shadow = pair_record(Sampled(trace("b1", "shadow", answer="x"), "rate"), "random", SLICER_4)
    assert "slices" not in shadow


def test_slice_counters_do_not_exist_while_the_slices_detector_is_off() -> None:
    registry = SidecarRegistry()
    latency = LatencyDetector(LatencyConfig(), registry, slo_stages={"total": 1.5})
    latency.observe(trace("a1", stages={"total": 2.0}))
    names = {family.name for family in registry.collect()}
    assert not any(name.startswith("rag_slice_") for name in names)


def test_a_slice_without_failures_has_its_failure_series_at_zero() -> None:
    """The share of a slice with no slow request is 0, not missing: the failure counter
    exists as soon as the slice has an event."""
    registry = SidecarRegistry()
    latency = LatencyDetector(LatencyConfig(), registry, slo_stages={"total": 1.5}, slicer=SLICER_4)
    latency.observe(trace("a1", stages={"total": 0.2}))
    slow = [
        s
        for family in registry.collect()
        for s in family.samples
        if s.name == SLICE_LATENCY_SLOW_TOTAL and s.labels["slice"] == "billing"
    ]
    assert [s.value for s in slow] == [0.0]


def test_a_verdict_counts_judge_agreement_in_the_items_slices(tmp_path: Path) -> None:
    """The review item keeps its request's slices (through its record, as the store and
    the topic hold it); a verdict counts the agreement in each, with every cell of a new
    (slice, judge) at 0; a slice this replica does not configure is not counted."""
    registry = SidecarRegistry()
    config = ReviewConfig.model_validate({"enabled": True, "http": {"enabled": False}})
    detector = ReviewDetector(config, registry, tmp_path, slicer=SLICER_4)
    served = trace("a1", query="How long do refunds take?", answer="A year.")
    item = item_of(served, slicer=SLICER_4)
    assert item is not None
    item = replace(item_from_record(item_record(item)), strata=("random",), hhem_score=0.9,
                   hhem_threshold=0.5, judge="hhem/m@1/t0.5")  # fmt: skip
    foreign = replace(item, trace_id="a2", slices=(("intent", "<b>spam</b>"),))
    detector.on_verdict(item, Verdict("a1", "no"))
    detector.on_verdict(foreign, Verdict("a2", "no"))
    cells = {
        (s.labels["dimension"], s.labels["slice"], s.labels["hhem"], s.labels["human"]): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == SLICE_JUDGE_AGREEMENT_TOTAL and s.labels["stratum"] == "random"
    }
    assert cells[("intent", "billing", "supported", "no")] == 1
    assert cells[("document_type", PDF, "supported", "no")] == 1
    assert cells[("intent", "billing", "supported", "yes")] == 0
    assert {key[:2] for key in cells} == {
        ("intent", "billing"), ("document_type", PDF), ("document_type", "other"),
    }  # fmt: skip
