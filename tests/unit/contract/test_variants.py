"""The variant label: one allow-list (service.variants), folded once by the pipeline, on
every guardrail series; feedback follows its trace's variant."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from collectors.spans.assembly import SpanAssembly
from detectors.cost.config import CostConfig
from detectors.cost.detector import CostDetector
from detectors.faithfulness import FaithfulnessDetector
from detectors.faithfulness.config import FaithfulnessConfig
from detectors.feedback.detector import FeedbackDetector
from detectors.filter_exclusion.config import FilterExclusionConfig
from detectors.filter_exclusion.detector import FilterExclusionDetector
from detectors.latency.config import LatencyConfig
from detectors.latency.detector import LatencyDetector
from monitor.contract.config import Config
from monitor.contract.detector import InlineDetector
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Context, Event, Feedback, Label, RagTrace
from monitor.contract.variants import OTHER, PRODUCTION, VariantFolding, bounded_label
from monitor.contract.work_items import Events, WholeTrace
from monitor.runtime.config_loading import ConfigError, load_config
from monitor.runtime.pipeline import Pipeline
from tests.conftest import sample, wait_until
from tests.hhem_checkpoint import build_checkpoint

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def trace(trace_id: str = "a1", variant: str | None = None, **fields: object) -> RagTrace:
    fields.setdefault("time", T0)
    return RagTrace(trace_id=trace_id, source="otlp", variant=variant, **fields)  # type: ignore[arg-type]


def variants_of(registry: SidecarRegistry, name: str) -> dict[str, float]:
    """Total of ``name`` per variant label value."""
    totals: dict[str, float] = {}
    for family in registry.collect():
        for s in family.samples:
            if s.name == name:
                variant = s.labels["variant"]
                totals[variant] = totals.get(variant, 0.0) + s.value
    return totals


@pytest.mark.parametrize(
    ("value", "allowed", "expected"),
    [("shadow", {"shadow"}, "shadow"), ("x" * 100, {"shadow"}, OTHER), (None, {"a"}, "none")],
    ids=["listed", "unlisted", "absent"],
)
def test_bounded_label(value: str | None, allowed: set[str], expected: str) -> None:
    """A value is kept when listed, folded into other when not, and none when absent."""
    assert bounded_label(value, allowed) == expected


def test_variants_default_and_production_is_implied(tmp_path: Path) -> None:
    """The default list is production, shadow, canary; a configured list gets production first."""
    assert Config().service.variants == ["production", "shadow", "canary"]
    path = tmp_path / "config.yaml"
    path.write_text("service:\n  variants: [candidate, candidate]\n")
    assert load_config(path, environ={}).service.variants == ["production", "candidate"]


@pytest.mark.parametrize(
    ("variants", "problem"),
    [("[other]", "reserved"), ("['a b']", "not a label value"), (str(list(range(20))), "at most")],
    ids=["reserved", "free-text", "too-many"],
)
def test_bad_variant_lists_are_refused(variants: str, problem: str, tmp_path: Path) -> None:
    """A variant list that could not stay a small set of labels fails at start-up."""
    path = tmp_path / "config.yaml"
    path.write_text(f"service:\n  variants: {variants}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert any("service.variants" in p and problem in p for p in raised.value.problems)


def test_folding_counts_unlisted_variants_and_keeps_the_rest() -> None:
    """An unlisted variant becomes other and is counted; listed and absent ones pass as is."""
    registry = SidecarRegistry()
    folding = VariantFolding(["shadow"], registry)
    listed, absent = trace(variant="shadow"), trace()
    assert folding.fold(listed) is listed
    assert folding.fold(absent) is absent
    assert folding.fold(trace(variant="blue-green-42")).variant == OTHER
    assert sample(registry, "rag_variant_folded_total") == 1
    assert folding.labels == {PRODUCTION, "shadow", OTHER}


class Variants(InlineDetector):
    """Records the variant each trace reaches the detectors with."""

    name = "variants"

    def __init__(self) -> None:
        self.seen: list[str | None] = []

    def observe(self, trace: RagTrace) -> None:
        self.seen.append(trace.variant)

    def observe_event(self, event: Event) -> None:
        pass


def test_pipeline_folds_before_the_detectors_and_counts_requests_by_variant() -> None:
    """Detectors see only listed variants (or none); rag_requests_total carries the label."""
    config, registry, seen = Config(), SidecarRegistry(), Variants()
    pipeline = Pipeline(
        SpanAssembly(config.collectors.spans.assembly, config.collectors.spans.mapping),
        [seen],
        PipelineMetrics(registry, ["shadow"]),
    )
    pipeline.start()
    for index, variant in enumerate([None, "shadow", "canary", "shadow", "weird"]):
        pipeline.submit(WholeTrace(trace(f"{index:x}", variant)))
    pipeline.shutdown()
    assert seen.seen == [None, "shadow", OTHER, "shadow", OTHER]
    assert variants_of(registry, "rag_requests_total") == {
        PRODUCTION: 1,
        "shadow": 2,
        OTHER: 2,
    }
    assert sample(registry, "rag_variant_folded_total") == 2


def test_latency_histogram_by_variant_and_window_of_production_only() -> None:
    """Stage latencies are observed under the trace's variant; the per-replica window
    quantiles take production traffic only."""
    registry = SidecarRegistry()
    latency = LatencyDetector(LatencyConfig(), registry)
    latency.observe(trace(stages={"generate": 0.2}))
    latency.observe(trace(variant="shadow", stages={"generate": 9.0}))
    assert variants_of(registry, "rag_stage_latency_seconds_count") == {
        PRODUCTION: 1,
        "shadow": 1,
    }
    assert latency.window.quantile("generate", 0.99) == pytest.approx(0.2, rel=0.01)


def test_cost_by_variant() -> None:
    """The cost histogram, spend and pricing counters carry the trace's variant."""
    registry = SidecarRegistry()
    cost = CostDetector(CostConfig(), registry)
    cost.observe(trace(cost_usd=0.01))
    cost.observe(trace(variant="canary", cost_usd=0.03))
    assert variants_of(registry, "rag_request_cost_usd_sum") == pytest.approx(
        {PRODUCTION: 0.01, "canary": 0.03}
    )
    assert variants_of(registry, "rag_cost_usd_total") == pytest.approx(
        {PRODUCTION: 0.01, "canary": 0.03}
    )
    assert sample(registry, "rag_cost_requests_total", pricing="complete", variant="canary") == 1


def test_faithfulness_scores_by_variant(tmp_path: Path) -> None:
    """Evaluations, scores and below-threshold counts carry the scored trace's variant."""
    checkpoint, _ = build_checkpoint(tmp_path / "hhem")
    settings = {"model": str(checkpoint), "sample_rate": 1.0, "threshold": 1.0, "precision": "fp32"}
    registry = SidecarRegistry()
    faithfulness = FaithfulnessDetector(FaithfulnessConfig.model_validate(settings), registry)
    faithfulness.start()
    try:
        contexts = (Context(doc_id="d1", text="Refunds are possible within 30 days."),)
        for trace_id, variant in (("a1", None), ("b1", "shadow"), ("b2", "shadow")):
            answer = "Refunds take a year."
            faithfulness.observe(trace(trace_id, variant, answer=answer, contexts=contexts))
        wait_until(lambda: sample(registry, "rag_faithfulness_score_count") == 3, timeout=60)
    finally:
        faithfulness.shutdown()
    expected = {PRODUCTION: 1, "shadow": 2}
    assert variants_of(registry, "rag_faithfulness_score_count") == expected
    assert variants_of(registry, "rag_faithfulness_below_threshold_total") == expected
    scored = sample(
        registry, "rag_faithfulness_evaluations_total", outcome="scored", variant="shadow"
    )
    assert scored == 2


def test_feedback_follows_its_traces_variant() -> None:
    """Feedback on a shadow trace counts as shadow; on a trace never seen, as production;
    a shadow twin with the same session and query is no re-ask of its request."""
    registry = SidecarRegistry()
    feedback = FeedbackDetector(registry)
    asked = {"session_id": "s1", "query": "How do refunds work?"}
    feedback.observe(trace("a1", **asked))
    feedback.observe(trace("b1", "shadow", **asked, time=T0 + timedelta(seconds=1)))
    feedback.observe_event(Feedback("b1", "thumbs_down", reason="wrong"))
    feedback.observe_event(Feedback("ff", "regenerate"))
    assert sample(registry, "rag_feedback_events_total", kind="thumbs_down", variant="shadow") == 1
    assert sample(registry, "rag_feedback_thumbs_down_total", reason="wrong", variant="shadow") == 1
    assert variants_of(registry, "rag_feedback_events_total") == {PRODUCTION: 1, "shadow": 1}
    assert sample(registry, "rag_feedback_events_total", kind="regenerate") == 1


def test_false_exclusion_ratio_counters_by_variant() -> None:
    """A labelled query counts in the eligible and false-exclusion counters of its variant."""
    registry = SidecarRegistry()
    detector = FilterExclusionDetector(FilterExclusionConfig(), registry)
    detector.observe(trace("a1", retrieved=("d1",)))
    detector.observe(trace("b1", "shadow", retrieved=(), relevance_excluded=("d1",)))
    for trace_id in ("a1", "b1"):
        detector.observe_event(Label(("d1",), trace_id=trace_id))
    assert variants_of(registry, "rag_filter_eligible_queries_total") == {
        PRODUCTION: 1,
        "shadow": 1,
    }
    assert variants_of(registry, "rag_filter_false_exclusions_total") == {
        PRODUCTION: 0,
        "shadow": 1,
    }


def test_feedback_through_the_pipeline_counts_under_its_traces_variant() -> None:
    """A feedback event after its canary trace counts as canary in a running pipeline."""
    registry = SidecarRegistry()
    config = Config()
    feedback = FeedbackDetector(registry)
    pipeline = Pipeline(
        SpanAssembly(config.collectors.spans.assembly, config.collectors.spans.mapping),
        [feedback],
        PipelineMetrics(registry),
    )
    pipeline.start()
    pipeline.submit(WholeTrace(trace("a1", "canary")))
    pipeline.submit(Events([Feedback("a1", "copy")], "otlp"))
    pipeline.shutdown()
    assert sample(registry, "rag_feedback_events_total", kind="copy", variant="canary") == 1
