"""No score without evidence: one trace whose retriever returned nothing (no contexts, no
retrieved ids; no usage, no stage but total, no query vector) through every detector ends
in a counted missing input, or in the detector's normal result where it does not need the
missing field; never in a value computed from the empty input."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from detectors.cost.config import CostConfig
from detectors.cost.detector import CostDetector
from detectors.drift.config import DriftConfig
from detectors.drift.detector import DriftDetector
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.faithfulness.detector import FaithfulnessDetector
from detectors.feedback.detector import FeedbackDetector
from detectors.filter_exclusion.config import FilterExclusionConfig
from detectors.filter_exclusion.detector import FilterExclusionDetector
from detectors.latency.config import LatencyConfig
from detectors.latency.detector import LatencyDetector
from detectors.release.config import ReleaseConfig
from detectors.release.detector import ReleaseDetector
from detectors.review.config import ReviewConfig
from detectors.review.metrics import ReviewMetrics
from detectors.review.sampler import Action, Enqueue, ReviewSampler
from detectors.shadow.metrics import ShadowMetrics
from detectors.shadow.model import PairOutcome, half_of, paired_deltas
from detectors.slices.config import SlicesConfig
from detectors.slices.detector import SlicesDetector
from monitor.contract.components import load_components
from monitor.contract.config import Config, detector_section
from monitor.contract.names import MISSING_INPUTS_TOTAL
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import STAGES, Context, Event, ExclusionOutcome, Label, RagTrace, Usage
from monitor.runtime.sidecar import build_detectors
from tests.conftest import sample

T0 = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)

# The request as a blind mapping (or a retriever that found nothing) hands it over.
NOTHING_RETRIEVED = RagTrace(
    trace_id="ab" * 16,
    time=T0,
    source="otlp",
    tenant="acme",
    session_id="s1",
    query="What is the refund policy?",
    answer="Refunds are possible within 30 days of purchase.",
    stages={"total": 0.8},
)
# The same request as a mapping that sees everything hands it over: the control.
EVERYTHING_SEEN = replace(
    NOTHING_RETRIEVED,
    trace_id="cd" * 16,
    contexts=(Context("d1", text="Refunds are possible within 30 days."),),
    retrieved=("d1",),
    stages={"retrieve": 0.1, "generate": 0.6, "total": 0.8},
    usage=(Usage("gpt-4o", "openai", 1000, 100),),
    query_embedding=(0.1, 0.2, 0.3),
)


def missing(registry: SidecarRegistry, detector: str, field: str) -> float:
    return sample(registry, MISSING_INPUTS_TOTAL, detector=detector, field=field)


def test_faithfulness_counts_no_context_and_sends_nothing_to_hhem() -> None:
    """Sampled at rate 1: no_context, contexts counted missing, nothing queued or scored;
    the control trace is queued for the model."""
    registry = SidecarRegistry()
    config = FaithfulnessConfig.model_validate({"sample_rate": 1.0, "max_per_second": 1e6})
    detector = FaithfulnessDetector(config, registry)  # not started: no model needed
    detector.observe(NOTHING_RETRIEVED)
    evaluations = "rag_faithfulness_evaluations_total"
    assert sample(registry, evaluations, outcome="no_context") == 1
    assert sample(registry, evaluations) == 1
    assert missing(registry, "faithfulness", "contexts") == 1
    assert detector.sampler.queue.qsize() == 0
    detector.observe(EVERYTHING_SEEN)
    assert detector.sampler.queue.qsize() == 1
    assert sample(registry, "rag_faithfulness_score_count") == 0


def test_cost_without_usage_is_missing_never_zero_dollars() -> None:
    """No usage and no producer cost: usage counted missing, the request unpriced, no cost
    observed; the control is priced."""
    registry = SidecarRegistry()
    detector = CostDetector(CostConfig(), registry)
    detector.observe(NOTHING_RETRIEVED)
    assert missing(registry, "cost", "usage") == 1
    assert sample(registry, "rag_cost_requests_total", pricing="unpriced") == 1
    assert sample(registry, "rag_request_cost_usd_count") == 0
    detector.observe(EVERYTHING_SEEN)
    assert sample(registry, "rag_request_cost_usd_count") == 1
    assert missing(registry, "cost", "usage") == 1


def test_cost_a_producer_figure_needs_no_usage() -> None:
    """llm.cost.total without token counts is the producer's own figure: observed as is."""
    registry = SidecarRegistry()
    detector = CostDetector(CostConfig(), registry)
    detector.observe(replace(NOTHING_RETRIEVED, cost_usd=0.004))
    assert sample(registry, "rag_request_cost_usd_sum") == 0.004
    assert missing(registry, "cost", "usage") == 0


def test_latency_observes_only_the_stages_a_trace_has() -> None:
    """With total alone, only total is observed: no other stage gets a 0 in the histogram
    or the window quantiles; the missing stage with an SLO (retrieve) is counted missing."""
    registry = SidecarRegistry()
    detector = LatencyDetector(
        LatencyConfig(), registry, slo_stages={"total": 1.5, "retrieve": 0.5}
    )
    detector.observe(NOTHING_RETRIEVED)
    assert missing(registry, "latency", "stage_retrieve") == 1
    assert missing(registry, "latency", "stage_generate") == 0  # no SLO: not watched
    counts = {
        stage: sample(registry, "rag_stage_latency_seconds_count", stage=stage) for stage in STAGES
    }
    assert counts == {stage: float(stage == "total") for stage in STAGES}
    assert detector.window.quantile("retrieve", 0.5) is None
    assert detector.window.quantile("total", 0.5) == pytest.approx(0.8, rel=0.01)
    detector.observe(EVERYTHING_SEEN)
    assert missing(registry, "latency", "stage_retrieve") == 1


@pytest.mark.parametrize(
    ("settings", "trace", "field"),
    [
        ({}, NOTHING_RETRIEVED, "query_vector"),
        ({"embedder": "any-encoder"}, replace(NOTHING_RETRIEVED, query=None), "query"),
    ],
    ids=["traced-vectors", "embedder"],
)
def test_drift_without_its_input_counts_it_missing_and_queues_nothing(
    tmp_path: Path, settings: dict[str, Any], trace: RagTrace, field: str
) -> None:
    """No query vector (or, with an embedder, no query): counted missing on the pipeline
    thread, nothing queued for the test; the control trace is queued."""
    registry = SidecarRegistry()
    detector = DriftDetector(DriftConfig.model_validate(settings), tmp_path, registry)
    detector.observe(trace)
    assert missing(registry, "drift", field) == 1
    assert sample(registry, "rag_monitor_queue_depth", queue="drift") == 0
    detector.observe(EVERYTHING_SEEN)
    assert sample(registry, "rag_monitor_queue_depth", queue="drift") == 1
    assert sample(registry, "rag_drift_rejected_vectors_total") == 0


@pytest.mark.parametrize(
    "trace",
    [
        NOTHING_RETRIEVED,
        replace(
            EVERYTHING_SEEN,
            trace_id="0d" * 16,
            contexts=(Context("sha-1f2e", text="Refunds...", id_derived=True),),
        ),
    ],
    ids=["nothing-retrieved", "derived-document-id"],
)
def test_filter_exclusion_without_retrieved_ids_is_missing_not_a_recall_of_zero(
    trace: RagTrace,
) -> None:
    """A labeled query whose trace shows no retrieval gold can be matched against: counted
    missing; no eligible query, no recall, no decision emitted. The control is scored."""
    registry = SidecarRegistry()
    emitted: list[Event] = []
    detector = FilterExclusionDetector(
        FilterExclusionConfig(), registry, emit=lambda event: emitted.append(event) is None
    )
    detector.observe(trace)
    detector.observe_event(Label(("d1",), trace_id=trace.trace_id))
    assert missing(registry, "filter_exclusion", "retrieved_ids") == 1
    assert sample(registry, "rag_filter_eligible_queries_total") == 0
    assert sample(registry, "rag_retrieval_recall_count") == 0
    assert emitted == []
    assert sample(registry, "rag_filter_unmatched_labels_total") == 0  # the label was used
    detector.observe(EVERYTHING_SEEN)
    detector.observe_event(Label(("d1",), trace_id=EVERYTHING_SEEN.trace_id))
    assert sample(registry, "rag_filter_eligible_queries_total") == 1
    assert emitted == [ExclusionOutcome(EVERYTHING_SEEN.trace_id, False, excluded_share=0.0)]


def test_filter_exclusion_a_filter_that_removed_everything_is_still_scored() -> None:
    """No retrieved id but a relevance exclusion: the filter's work is evidence, and losing
    every gold document to it is the false exclusion the detector exists for."""
    registry = SidecarRegistry()
    detector = FilterExclusionDetector(FilterExclusionConfig(), registry)
    detector.observe(replace(NOTHING_RETRIEVED, relevance_excluded=("d1",)))
    detector.observe_event(Label(("d1",), trace_id=NOTHING_RETRIEVED.trace_id))
    assert sample(registry, "rag_filter_false_exclusions_total") == 1
    assert missing(registry, "filter_exclusion", "retrieved_ids") == 0


def review_sampler(registry: SidecarRegistry, taken: list[Action]) -> ReviewSampler:
    config = ReviewConfig.model_validate({"enabled": True, "random_rate": 1.0, "weekly_reading": 0})
    return ReviewSampler(config, ReviewMetrics(registry), lambda a: taken.append(a) is None)


@pytest.mark.parametrize(
    ("trace", "fields"),
    [
        (replace(NOTHING_RETRIEVED, query=None), {"query"}),
        (replace(NOTHING_RETRIEVED, answer=""), {"answer"}),
        (replace(NOTHING_RETRIEVED, query=None, answer=None), {"query", "answer"}),
    ],
    ids=["no-query", "no-answer", "neither"],
)
def test_review_a_trace_without_query_or_answer_is_missing_never_queued(
    trace: RagTrace, fields: set[str]
) -> None:
    """A reviewer would have nothing to judge: each absent field is counted, nothing queued."""
    registry, taken = SidecarRegistry(), list[Action]()
    review_sampler(registry, taken).observe(trace)
    assert taken == []
    counted = {f for f in ("query", "answer") if missing(registry, "review", f)}
    assert counted == fields


def test_review_an_answer_without_documents_is_still_reviewed() -> None:
    """A reviewer can judge an answer given without documents: queued, with no contexts
    and no judge score (HHEM gave none)."""
    registry, taken = SidecarRegistry(), list[Action]()
    review_sampler(registry, taken).observe(NOTHING_RETRIEVED)
    [action] = taken
    assert isinstance(action, Enqueue)
    assert (action.item.contexts, action.item.hhem_score) == ((), None)
    assert missing(registry, "review", "query") == missing(registry, "review", "answer") == 0


def test_shadow_a_twin_without_retrieval_or_stages_is_unscorable_not_zero() -> None:
    """Against a twin that saw everything: no overlap of 0, no stage delta from a missing
    stage; each counted unscorable. Total, which both have, is compared."""
    production = half_of(replace(EVERYTHING_SEEN, pair_id="p1"), keep_text=False)
    shadow = half_of(replace(NOTHING_RETRIEVED, pair_id="p1", variant="shadow"), keep_text=False)
    deltas = paired_deltas(production, shadow)
    assert deltas["retrieval_overlap"] is None
    assert deltas["latency_retrieve"] is None
    assert deltas["latency_generate"] is None
    assert deltas["latency_total"] == 0.0
    registry = SidecarRegistry()
    metrics = ShadowMetrics(registry, ["shadow"])
    metrics.record(PairOutcome("joined", "p1", 1.0, production, shadow))
    unscorable = "rag_shadow_unscorable_total"
    assert sample(registry, unscorable, metric="retrieval_overlap") == 1
    assert sample(registry, unscorable, metric="latency_retrieve") == 1
    assert sample(registry, unscorable, metric="latency_total") == 0
    assert sample(registry, "rag_shadow_retrieval_overlap_count") == 0


def test_feedback_and_slices_need_no_documents() -> None:
    """A re-ask of the same query is a regeneration with or without documents, and the
    coverage matrix puts a request without contexts in its document_type="none" cell."""
    registry = SidecarRegistry()
    feedback = FeedbackDetector(registry)
    slices = SlicesDetector(SlicesConfig.model_validate({"intents": ["billing"]}), registry)
    again = replace(NOTHING_RETRIEVED, trace_id="ef" * 16, time=T0 + timedelta(seconds=20))
    for trace in (NOTHING_RETRIEVED, again):
        feedback.observe(trace)
        slices.observe(trace)
    assert sample(registry, "rag_feedback_events_total", kind="regenerate") == 1
    assert sample(registry, "rag_coverage_requests_total", document_type="none") == 2
    assert sample(registry, "rag_slice_regenerations_total", intent="none") == 1


def test_release_without_a_version_exports_nothing() -> None:
    """No service.version: no release series at all, not an empty version."""
    registry = SidecarRegistry()
    detector = ReleaseDetector(ReleaseConfig(), registry)
    detector.observe(NOTHING_RETRIEVED)
    assert sample(registry, "rag_release_info") == 0
    detector.observe(replace(NOTHING_RETRIEVED, service_version="1.2.0"))
    assert sample(registry, "rag_release_info", version="1.2.0") == 1


@pytest.mark.parametrize(
    ("settings", "watched"),
    [
        (
            {
                "detectors": {"review": {"enabled": True}},
                "guardrails": {"latency_slo": {"retrieve": {}}},
            },
            {
                ("cost", "usage"),
                ("drift", "query_vector"),
                ("faithfulness", "answer"),
                ("faithfulness", "contexts"),
                ("filter_exclusion", "retrieved_ids"),
                ("latency", "stage_retrieve"),
                ("review", "query"),
                ("review", "answer"),
            },
        ),
        (
            {
                "detectors": {
                    "drift": {"embedder": "any-encoder"},
                    "faithfulness": {"enabled": False},
                }
            },
            {("cost", "usage"), ("drift", "query"), ("filter_exclusion", "retrieved_ids")},
        ),
    ],
    ids=["review-and-a-retrieve-slo", "embedder-no-faithfulness"],
)
def test_each_detector_counts_missing_exactly_the_fields_its_component_names(
    tmp_path: Path, settings: dict[str, Any], watched: set[tuple[str, str]]
) -> None:
    """The series a built detector exports at 0 are the fields its component declares it
    reads (what the coverage ticket watches): one list, whatever the configuration."""
    config = Config.model_validate({"service": {"state_dir": str(tmp_path)}, **settings})
    registry = SidecarRegistry()
    build_detectors(config, registry)
    counted = {
        (s.labels["detector"], s.labels["field"])
        for family in registry.collect()
        for s in family.samples
        if s.name == MISSING_INPUTS_TOTAL
    }
    declared = {
        (component.name, field)
        for component in load_components()
        for field in component.fields(
            detector_section(config, component),
            config.guardrails,
        )
    }
    assert counted == declared == watched
