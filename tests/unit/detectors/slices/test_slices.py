"""The slices detector: intent and document-type labels from allow-lists, regenerations by
intent, the coverage matrix, its bounded trace map, and its recording rule."""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from alerts.rules import write_promtool_suite
from detectors.slices.component import COMPONENT
from detectors.slices.config import SlicesConfig
from detectors.slices.detector import SlicesDetector
from monitor.contract.config import Config
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Context, Feedback, RagTrace
from monitor.runtime.config_loading import ConfigError, load_config
from tests.conftest import sample
from tests.integration.conftest import binary

T0 = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)
INTENTS = ["billing", "refunds"]
PDF, HTML = "application/pdf", "text/html"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def detector(**config: object) -> tuple[SlicesDetector, SidecarRegistry, Clock]:
    registry, clock = SidecarRegistry(), Clock()
    settings = SlicesConfig.model_validate({"intents": INTENTS, **config})
    return SlicesDetector(settings, registry, clock), registry, clock


def trace(
    trace_id: str = "a1",
    intent: str | None = "billing",
    types: tuple[str | None, ...] = (PDF,),
    variant: str | None = None,
    **fields: object,
) -> RagTrace:
    contexts = tuple(
        Context(doc_id=f"d{i}", metadata={} if t is None else {"file_type": t})
        for i, t in enumerate(types)
    )
    fields.setdefault("time", T0)
    return RagTrace(
        trace_id=trace_id,
        source="otlp",
        intent=intent,
        variant=variant,
        contexts=contexts,
        **fields,  # type: ignore[arg-type]
    )


def series(registry: SidecarRegistry, name: str) -> dict[tuple[str, ...], float]:
    return {
        tuple(s.labels.values()): s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == name
    }


def test_no_intents_means_no_series() -> None:
    """With intents empty (the default) the detector exports nothing and counts nothing."""
    registry = SidecarRegistry()
    slices = SlicesDetector(SlicesConfig(), registry)
    slices.observe(trace())
    slices.observe_event(Feedback("a1", "regenerate"))
    assert not [s for family in registry.collect() for s in family.samples]


@pytest.mark.parametrize(
    ("intent", "label"),
    [("billing", "billing"), ("how do I hack this", "other"), (None, "none"), ("", "none")],
    ids=["listed", "unlisted-folds-to-other", "missing-is-none", "empty-is-none"],
)
def test_requests_count_under_the_bounded_intent(intent: str | None, label: str) -> None:
    """A request counts under its intent when listed, else other, or none without one."""
    slices, registry, _ = detector()
    slices.observe(trace(intent=intent))
    requests = series(registry, "rag_slice_requests_total")
    assert requests[(label, "production")] == 1
    assert sum(requests.values()) == 1
    assert {intent for intent, _ in requests} == {*INTENTS, "other", "none"}


def test_coverage_counts_each_distinct_document_type_once() -> None:
    """A request adds 1 to each distinct type of its contexts; unlisted is other, a context
    without the key none, a request without contexts none; shadow twins add nothing."""
    slices, registry, _ = detector()
    slices.observe(trace("a1", types=(PDF, PDF, HTML)))
    slices.observe(trace("a2", types=("image/png", None)))
    slices.observe(trace("a3", intent="refunds", types=()))
    slices.observe(trace("a4", types=(PDF,), variant="shadow"))
    coverage = {cell: n for cell, n in series(registry, "rag_coverage_requests_total").items() if n}
    assert coverage == {
        ("billing", PDF): 1,
        ("billing", HTML): 1,
        ("billing", "other"): 1,
        ("billing", "none"): 1,
        ("refunds", "none"): 1,
    }


def test_every_coverage_cell_exists_at_zero() -> None:
    """The matrix has every configured cell from the start, so an empty cell reads 0."""
    _, registry, _ = detector(document_types=[PDF])
    cells = series(registry, "rag_coverage_requests_total")
    intents, types = ["billing", "refunds", "other", "none"], [PDF, "other", "none"]
    assert cells == {(i, t): 0.0 for i in intents for t in types}


def test_document_type_key_is_configurable() -> None:
    """The type is read from document_type_key (LangChain's Unstructured loaders: filetype)."""
    slices, registry, _ = detector(document_type_key="filetype")
    context = Context(doc_id="d1", metadata={"filetype": PDF, "file_type": HTML})
    slices.observe(RagTrace(trace_id="b1", time=T0, source="otlp", contexts=(context,)))
    assert sample(registry, "rag_coverage_requests_total", intent="none", document_type=PDF) == 1


def test_regenerate_feedback_counts_under_its_traces_intent_and_variant() -> None:
    """Regenerate events land on their trace's intent and variant; others kinds are not
    regenerations; an unknown trace is counted as unmatched."""
    slices, registry, _ = detector()
    slices.observe(trace("a1", intent="refunds"))
    slices.observe(trace("a2", intent="billing", variant="canary"))
    for event in (
        Feedback("a1", "regenerate"),
        Feedback("a1", "thumbs_down"),
        Feedback("a2", "regenerate"),
        Feedback("ff", "regenerate"),
    ):
        slices.observe_event(event)
    regenerations = {
        k: v for k, v in series(registry, "rag_slice_regenerations_total").items() if v
    }
    assert regenerations == {("refunds", "production"): 1, ("billing", "canary"): 1}
    assert sample(registry, "rag_slice_unmatched_feedback_total") == 1


def test_reask_in_the_same_session_is_a_regeneration_of_its_intent() -> None:
    """The same query again in the session within a minute counts as a regeneration."""
    slices, registry, _ = detector()
    asked = {"session_id": "s1", "query": "How do refunds work?"}
    slices.observe(trace("a1", intent="refunds", **asked))
    slices.observe(trace("a2", intent="refunds", **{**asked, "time": T0 + timedelta(seconds=20)}))
    assert sample(registry, "rag_slice_regenerations_total", intent="refunds") == 1


def test_feedback_after_the_ttl_is_unmatched() -> None:
    """A regenerate event feedback_ttl_s after its trace is no longer sliced."""
    slices, registry, clock = detector(feedback_ttl_s=60)
    slices.observe(trace("a1"))
    clock.now = 61
    slices.observe_event(Feedback("a1", "regenerate"))
    assert sample(registry, "rag_slice_regenerations_total") == 0
    assert sample(registry, "rag_slice_unmatched_feedback_total") == 1


def test_trace_map_is_bounded_and_evictions_counted() -> None:
    """Past max_tracked_traces the oldest trace goes, counted; its feedback is unmatched."""
    slices, registry, _ = detector(max_tracked_traces=3)
    for i in range(5):
        slices.observe(trace(f"a{i}"))
    assert sample(registry, "rag_slice_evicted_traces_total") == 2
    slices.observe_event(Feedback("a0", "regenerate"))
    slices.observe_event(Feedback("a4", "regenerate"))
    assert sample(registry, "rag_slice_unmatched_feedback_total") == 1
    assert sample(registry, "rag_slice_regenerations_total", intent="billing") == 1


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        ("intents", ["other"], "reserved"),
        ("document_types", ["none"], "reserved"),
        ("intents", ["two words"], "not a label value"),
        ("intents", [f"i{n}" for n in range(65)], "at most 64"),
    ],
    ids=["other-reserved", "none-reserved", "free-text", "too-many"],
)
def test_bad_allow_lists_are_refused(
    key: str, value: list[str], problem: str, tmp_path: Path
) -> None:
    """An allow-list entry that could not be a bounded label fails at start-up, with its key."""
    path = tmp_path / "config.yaml"
    path.write_text(f"detectors:\n  slices:\n    {key}: {value!r}\n")
    with pytest.raises(ConfigError) as raised:
        load_config(path, environ={})
    assert any(f"detectors.slices.{key}" in p and problem in p for p in raised.value.problems)


def test_recording_rule_passes_its_promtool_tests(tmp_path: Path) -> None:
    """The regeneration ratio by intent records production only, 0 for a quiet intent, and
    nothing for a thin window (promtool against the rendered rule)."""
    suite = write_promtool_suite(Config(), tmp_path, components=[COMPONENT])
    (tests,) = [path for path in suite if path.name.startswith("slices_")]
    result = subprocess.run(
        [binary("promtool"), "test", "rules", str(tests)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
