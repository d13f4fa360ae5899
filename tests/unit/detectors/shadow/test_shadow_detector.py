"""The shadow detector in one process: halves, late signals, metrics, store; and the core
pieces it relies on (twins sampled together, exclusion decisions emitted, no waiting on
the pipeline thread)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from detectors.filter_exclusion.config import FilterExclusionConfig
from detectors.filter_exclusion.detector import FilterExclusionDetector
from detectors.shadow.config import ShadowConfig
from detectors.shadow.detector import ShadowDetector
from monitor.contract.components import EMIT_TIMEOUT_S, EventHook
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.sampler import Sampler
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Event, ExclusionOutcome, JudgeScore, Label, RagTrace
from monitor.contract.work_items import PIPELINE_THREAD, WorkItem
from tests.conftest import sample, wait_until

SECRET = "what is the refund policy"  # noqa: S105 (production text, not a password)


def trace(trace_id: str, pair_id: str | None, variant: str | None, generate: float) -> RagTrace:
    return RagTrace(
        trace_id=trace_id,
        time=datetime.now(UTC),
        source="otlp",
        pair_id=pair_id,
        variant=variant,
        query=SECRET,
        answer="Refunds are possible within 30 days.",
        stages={"generate": generate},
        retrieved=("d1", "d2"),
    )


@pytest.fixture
def shadow(tmp_path: Path) -> Iterator[tuple[ShadowDetector, SidecarRegistry]]:
    registry = SidecarRegistry()
    config = ShadowConfig(enabled=True, pair_ttl_s=0.5, settle_s=0.5)
    detector = ShadowDetector(config, registry, tmp_path)
    detector.start()
    yield detector, registry
    detector.shutdown()


def test_pairs_join_with_late_signals_and_export_deltas(
    shadow: tuple[ShadowDetector, SidecarRegistry],
) -> None:
    """A pair with both twins scored exports latency, faithfulness and exclusion deltas."""
    detector, registry = shadow
    detector.observe(trace("a1", "p1", None, 1.0))
    detector.observe(trace("b1", "p1", "shadow", 1.25))
    detector.observe(trace("c1", None, None, 1.0))  # no pair id: not a half
    for event in (
        JudgeScore("a1", 0.9, 0.5),
        JudgeScore("b1", 0.6, 0.5),
        ExclusionOutcome("a1", excluded=False),
        ExclusionOutcome("b1", excluded=True),
        JudgeScore("c1", 0.1, 0.5),  # no half: ignored
    ):
        detector.observe_event(event)
    wait_until(lambda: sample(registry, "rag_shadow_pairs_total", variant="shadow") == 1)

    def value(name: str, **labels: str) -> float:
        return sample(registry, name, variant="shadow", **labels)

    # Signed histograms have no _sum: the buckets place each delta.
    assert value("rag_shadow_latency_delta_seconds_bucket", stage="generate", le="0.15") == 0
    assert value("rag_shadow_latency_delta_seconds_bucket", stage="generate", le="0.25") == 1
    assert value("rag_shadow_faithfulness_delta_bucket", le="-0.4") == 0
    assert value("rag_shadow_faithfulness_delta_bucket", le="-0.3") == 1
    assert value("rag_shadow_false_exclusion_scored_total") == 1
    assert value("rag_shadow_false_exclusion_disagreements_total", direction="shadow_only") == 1
    assert value("rag_shadow_retrieval_overlap_sum") == 1.0
    assert value("rag_shadow_answer_changed_total") == 0
    assert value("rag_shadow_unscorable_total", metric="cost_usd") == 1
    assert sample(registry, "rag_shadow_halves_total", variant="production", outcome="joined") == 1
    assert detector.store is not None
    (stored,) = detector.store.since(0.0)
    production, twin = stored.both()
    assert (production.query, production.answer, twin.excluded) == (None, None, True)


def test_lone_half_times_out_and_is_stored_as_unmatched(
    shadow: tuple[ShadowDetector, SidecarRegistry],
) -> None:
    """A production half without a twin ends as timed_out, in the metrics and the store."""
    detector, registry = shadow
    detector.observe(trace("a2", "p2", None, 1.0))
    wait_until(
        lambda: (
            sample(registry, "rag_shadow_halves_total", variant="production", outcome="timed_out")
            == 1
        )
    )
    assert detector.store is not None
    assert [o.outcome for o in detector.store.since(0.0)] == ["timed_out"]


def test_text_is_kept_only_with_text_storage(tmp_path: Path) -> None:
    """keep_text (review text storage on) is the only way query and answer reach the store."""
    registry = SidecarRegistry()
    config = ShadowConfig(enabled=True, settle_s=0.0)
    detector = ShadowDetector(config, registry, tmp_path, keep_text=True)
    detector.start()
    detector.observe(trace("a3", "p3", None, 1.0))
    detector.observe(trace("b3", "p3", "shadow", 1.0))
    detector.shutdown()
    reopened = ShadowDetector(config, SidecarRegistry(), tmp_path)
    reopened.start()
    assert reopened.store is not None
    (stored,) = reopened.store.since(0.0)
    assert stored.both()[0].query == SECRET
    reopened.shutdown()


def test_twins_of_a_pair_are_sampled_together() -> None:
    """The sampler hashes the pair id: both twins of a pair are taken, or neither."""
    sampler = Sampler(
        "faithfulness",
        SidecarRegistry(),
        sample_rate=0.3,
        always_sample=[],
        max_per_second=1e9,
        queue_size=100_000,
    )
    for i in range(500):
        production = sampler.offer(trace(f"{i:x}a", f"pair-{i}", None, 1.0))
        twin = sampler.offer(trace(f"{i:x}b", f"pair-{i}", "shadow", 1.0))
        assert production == twin


def test_filter_exclusion_emits_its_decision_for_each_scored_trace() -> None:
    """A labeled trace with eligible gold gives an ExclusionOutcome with the share of it a
    relevance filter removed; one without gives none."""
    emitted: list[Event] = []
    detector = FilterExclusionDetector(
        FilterExclusionConfig(), SidecarRegistry(), emit=lambda e: emitted.append(e) or True
    )
    kept = RagTrace(trace_id="aa", time=datetime.now(UTC), source="otlp", retrieved=("d1",))
    lost = RagTrace(
        trace_id="bb", time=datetime.now(UTC), source="otlp", relevance_excluded=("d1",)
    )
    unlabeled = RagTrace(trace_id="cc", time=datetime.now(UTC), source="otlp")
    for t in (kept, lost, unlabeled):
        detector.observe(t)
    detector.observe_event(Label(("d1",), trace_id="aa"))
    detector.observe_event(Label(("d1",), trace_id="bb"))
    assert emitted == [
        ExclusionOutcome("aa", excluded=False, excluded_share=0.0),
        ExclusionOutcome("bb", excluded=True, excluded_share=1.0),
    ]


class _TimeoutSink:
    """A consumer that records the timeout each submit was given."""

    def __init__(self) -> None:
        self.metrics = PipelineMetrics(SidecarRegistry())
        self.timeouts: list[float | None] = []

    def submit(self, item: WorkItem, timeout: float | None = None) -> bool:
        self.timeouts.append(timeout)
        return True


def test_event_hook_never_waits_on_the_pipeline_thread() -> None:
    """Emitted from the pipeline thread an event is only offered; elsewhere it may wait."""
    sink = _TimeoutSink()
    hook = EventHook()
    hook.bind(sink)
    on_pipeline = threading.Thread(target=hook, args=(JudgeScore("a", 1.0, 0.5),))
    on_pipeline.name = PIPELINE_THREAD
    on_pipeline.start()
    on_pipeline.join()
    hook(JudgeScore("b", 1.0, 0.5))
    assert sink.timeouts == [0.0, EMIT_TIMEOUT_S]


def test_config_refuses_one_topic_for_halves_and_pairs() -> None:
    """The halves (a consumer group) and the pairs (read whole) cannot share a topic."""
    with pytest.raises(ValidationError, match="two different topics"):
        ShadowConfig(halves_topic="rag-shadow", pairs_topic="rag-shadow")
