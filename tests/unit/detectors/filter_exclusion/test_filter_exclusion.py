"""False-exclusion rate, recall@k against eligible gold, the label join and entitlement leaks."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from detectors.filter_exclusion.config import FilterExclusionConfig
from detectors.filter_exclusion.detector import FilterExclusionDetector
from detectors.filter_exclusion.scoring import (
    Evidence,
    GoldenSetError,
    load_golden_set,
    score_query,
)
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Context, Label, RagTrace
from monitor.runtime.config_loading import ConfigError, load_config
from tests.conftest import (
    CALLER,
    PROBES,
    assert_worked_example,
    golden_set_lines,
    sample,
    worked_example_records,
)

T0 = datetime(2026, 12, 2, 14, 0, tzinfo=UTC)

# --- helpers -----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def trace_of(record: dict[str, Any]) -> RagTrace:
    from collectors.kafka.records import rag_trace_from_document

    return rag_trace_from_document(record, "kafka")


def make_trace(trace_id: str = "ab", **fields: Any) -> RagTrace:
    return RagTrace(
        **{"trace_id": trace_id, "time": T0, "source": "otlp", "tenant": CALLER, **fields}
    )


def detector(
    clock: FakeClock | None = None, **settings: Any
) -> tuple[FilterExclusionDetector, SidecarRegistry]:
    registry = SidecarRegistry()
    config = FilterExclusionConfig(**settings)
    return FilterExclusionDetector(config, registry, clock=clock or FakeClock()), registry


def label(
    gold: tuple[str, ...] | list[str], trace_id: str | None = None, probe_id: str | None = None
) -> Label:
    return Label(tuple(gold), trace_id=trace_id, probe_id=probe_id)


# --- the worked example ------------------------------------------------------------------


def feed_golden_set(d: FilterExclusionDetector, traces: list[RagTrace]) -> None:
    for t in traces:
        d.observe(t)


def feed_probe_labels_first(d: FilterExclusionDetector, traces: list[RagTrace]) -> None:
    for p in PROBES:
        d.observe_event(label(p.gold, probe_id=p.probe_id))
    for t in traces:
        d.observe(t)


def feed_trace_labels_after(d: FilterExclusionDetector, traces: list[RagTrace]) -> None:
    for t in traces:
        d.observe(t)
    gold = {p.probe_id: p.gold for p in PROBES}
    for t in traces:
        if t.probe_id is not None:
            d.observe_event(label(gold[t.probe_id], trace_id=t.trace_id))


@pytest.mark.parametrize(
    "feed",
    [feed_golden_set, feed_probe_labels_first, feed_trace_labels_after],
    ids=["golden-set-file", "probe-labels-before-traces", "trace-labels-after-traces"],
)
def test_worked_example_holds_exactly(tmp_path: Path, feed: Callable[..., None]) -> None:
    """The method's example: 2/4 false exclusions, mean recall@10 0.50, q5 not counted, one leak."""
    golden: Path | None = None
    if feed is feed_golden_set:
        golden = tmp_path / "golden.jsonl"
        golden.write_text(golden_set_lines())
    d, registry = detector(golden_set=golden)
    feed(d, [trace_of(r) for r in worked_example_records()])
    assert_worked_example(lambda name, **labels: sample(registry, name, **labels))
    status = d.status()
    assert status.false_exclusion_rate == 0.5
    assert status.describe().startswith("2/4 eligible queries (50.00%)")


def test_gold_rebuilt_after_filtering_would_hide_the_loss() -> None:
    """Scoring q1/q3 against gold intersected with the survivors drops them; the detector keeps them."""
    traces = {r["probe_id"]: trace_of(r) for r in worked_example_records() if "probe_id" in r}
    correct = [score_query(p.gold, Evidence.of(traces[p.probe_id], 10), [10]) for p in PROBES[:4]]
    assert [s.recall[10] for s in correct] == [0.0, 1.0, 0.0, 1.0]
    rebuilt = [
        score_query(
            set(p.gold) & set(traces[p.probe_id].retrieved),
            Evidence.of(traces[p.probe_id], 10),
            [10],
        )
        for p in PROBES[:4]
    ]
    # The invalid evaluator's "100%": only the queries that kept their gold remain.
    assert [s.recall for s in rebuilt if s.eligible_gold] == [{10: 1.0}, {10: 1.0}]


# --- scoring rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gold", "fields", "eligible", "excluded", "recall"),
    [
        (["d1"], {"entitlement_excluded": ("d1",)}, set(), set(), {}),
        (
            ["d1", "d3"],
            {"contexts": (Context("d3", tenant="globex"),), "retrieved": ("d3", "d1")},
            {"d1"},
            set(),
            {1: 0.0, 2: 1.0},
        ),
        (["d9"], {"retrieved": ("d1",)}, {"d9"}, set(), {1: 0.0, 2: 0.0}),
        (["d2"], {"relevance_excluded": ("d2",)}, {"d2"}, {"d2"}, {1: 0.0, 2: 0.0}),
        (["d2"], {"retrieved": ("d1", "d1", "d1", "d2")}, {"d2"}, set(), {1: 0.0, 2: 1.0}),
        (
            ["d1", "d2"],
            {"retrieved": ("d1",), "relevance_excluded": ("d2",)},
            {"d1", "d2"},
            {"d2"},
            {1: 0.5, 2: 0.5},
        ),
        (
            ["d1"],
            {"tenant": None, "contexts": (Context("d1", tenant="globex"),), "retrieved": ("d1",)},
            {"d1"},
            set(),
            {1: 1.0, 2: 1.0},
        ),
    ],
    ids=[
        "entitlement-excluded-is-ineligible",
        "foreign-tenant-context-is-ineligible",
        "unseen-gold-stays-eligible",
        "relevance-excluded-gold-stays-eligible",
        "duplicate-ids-take-one-rank",
        "multi-gold-partial-loss",
        "no-caller-tenant-no-tenant-rule",
    ],
)
def test_score_query(
    gold: list[str],
    fields: dict[str, Any],
    eligible: set[str],
    excluded: set[str],
    recall: dict[int, float],
) -> None:
    """Eligible gold = gold minus the caller's ineligible documents; recall over distinct ranks."""
    score = score_query(gold, Evidence.of(make_trace(**fields), 2), [1, 2])
    assert (set(score.eligible_gold), set(score.excluded_gold), score.recall) == (
        eligible,
        excluded,
        recall,
    )


def test_multi_gold_partial_loss_is_not_a_false_exclusion() -> None:
    """One of two gold documents filtered: recall 0.5 and 1 of 2 gold documents, no query-level loss."""
    d, registry = detector()
    d.observe(make_trace("t1", retrieved=("d1", "d7"), relevance_excluded=("d2",)))
    d.observe_event(label(["d1", "d2"], trace_id="t1"))
    assert sample(registry, "rag_filter_eligible_queries_total") == 1
    assert sample(registry, "rag_filter_false_exclusions_total") == 0
    assert sample(registry, "rag_filter_eligible_gold_docs_total") == 2
    assert sample(registry, "rag_filter_excluded_gold_docs_total") == 1
    assert sample(registry, "rag_retrieval_recall_sum", k="5") == 0.5


def test_empty_denominator_is_no_evidence_not_zero() -> None:
    """Without eligible queries the status says "no evidence" and the rate is None, not 0."""
    d, registry = detector()
    assert d.status().describe().startswith("no evidence")
    d.observe(make_trace("t1", entitlement_excluded=("d3",)))
    d.observe_event(label(["d3"], trace_id="t1"))
    status = d.status()
    assert (status.eligible_queries, status.no_eligible_gold, status.false_exclusion_rate) == (
        0,
        1,
        None,
    )
    assert status.describe().startswith("no evidence")
    assert sample(registry, "rag_filter_eligible_queries_total") == 0


# --- the join --------------------------------------------------------------------------------


def test_duplicate_trace_labels_score_once() -> None:
    """A label sent twice, before and after its trace, scores the trace once; the rest count as duplicates."""
    d, registry = detector()
    d.observe_event(label(["d2"], trace_id="t1"))
    d.observe_event(label(["d2"], trace_id="t1"))
    d.observe(make_trace("t1", relevance_excluded=("d2",)))
    d.observe_event(label(["d2"], trace_id="t1"))
    assert sample(registry, "rag_filter_eligible_queries_total") == 1
    assert sample(registry, "rag_filter_false_exclusions_total") == 1
    assert sample(registry, "rag_filter_duplicate_labels_total") == 2
    assert sample(registry, "rag_filter_join_pending", kind="labels") == 0


def test_probe_label_scores_every_replay_and_a_resend_counts_nothing() -> None:
    """One probe label joins each replay of the probe within the TTL, whichever arrives first."""
    d, registry = detector()
    d.observe(make_trace("t1", probe_id="q1", retrieved=("d2",)))
    d.observe_event(label(["d2"], probe_id="q1"))
    d.observe_event(label(["d2"], probe_id="q1"))
    d.observe(make_trace("t2", probe_id="q1", relevance_excluded=("d2",)))
    assert sample(registry, "rag_filter_eligible_queries_total") == 2
    assert sample(registry, "rag_filter_false_exclusions_total") == 1
    assert sample(registry, "rag_retrieval_recall_sum", k="10") == 1.0
    assert sample(registry, "rag_filter_join_pending", kind="traces") == 0


def test_join_ttl_expires_labels_and_probe_traces() -> None:
    """Past join_ttl_s a label or a probe trace is counted unmatched and no longer joins."""
    clock = FakeClock()
    d, registry = detector(clock=clock, join_ttl_s=60)
    d.observe_event(label(["d2"], trace_id="late"))
    d.observe(make_trace("probe-trace", probe_id="q-unknown"))
    d.observe(make_trace("plain", retrieved=("d1",)))
    clock.now += 59
    d.observe_event(label(["d1"], trace_id="plain"))  # just within the TTL: joins
    assert sample(registry, "rag_filter_eligible_queries_total") == 1
    clock.now += 2
    d.status()  # expiry also runs when the status is read
    assert sample(registry, "rag_filter_unmatched_labels_total") == 1
    assert sample(registry, "rag_filter_unmatched_probe_traces_total") == 1
    d.observe(make_trace("late", relevance_excluded=("d2",)))
    d.observe_event(label(["d2"], probe_id="q-unknown"))
    assert sample(registry, "rag_filter_eligible_queries_total") == 1
    clock.now += 61
    d.status()
    assert sample(registry, "rag_filter_unmatched_labels_total") == 2  # the probe label, unused
    assert sample(registry, "rag_filter_join_pending", kind="labels") == 0
    assert sample(registry, "rag_filter_join_pending", kind="traces") == 0


def test_pending_joins_are_bounded() -> None:
    """Over max_pending the oldest label is dropped and counted; unlabeled traces go quietly."""
    d, registry = detector(max_pending=2)
    for i in range(3):
        d.observe_event(label(["d1"], trace_id=f"l{i}"))
        d.observe(make_trace(f"t{i}"))
    assert sample(registry, "rag_filter_join_pending", kind="labels") == 2
    assert sample(registry, "rag_filter_join_pending", kind="traces") == 2
    assert sample(registry, "rag_filter_unmatched_labels_total") == 1
    assert sample(registry, "rag_filter_unmatched_probe_traces_total") == 0


# --- entitlement -------------------------------------------------------------------------------


def test_entitlement_violation_counted_and_logged_without_text() -> None:
    """A context of another tenant is one violation per document, one log line per trace
    with ids only, labeled or not."""
    d, registry = detector()
    contexts = (
        Context("d1", text="acme secret", tenant="acme"),
        Context("d3", chunk_id="d3#1", text="globex secret", tenant="globex"),
        Context("d3", chunk_id="d3#2", text="globex secret", tenant="globex"),
        Context("d8", metadata={"tenant": "initech"}),
    )
    with capture_logs() as logs:
        d.observe(make_trace("t1", contexts=contexts))
        d.observe(make_trace("t2", tenant=None, contexts=contexts))  # caller unknown: no verdict
    assert sample(registry, "rag_entitlement_violations_total") == 2
    errors = [e for e in logs if e["log_level"] == "error"]
    assert errors == [
        {
            "event": "entitlement_violation",
            "log_level": "error",
            "trace_id": "t1",
            "tenant": CALLER,
            "foreign_documents": 2,
            "doc_ids": ["d3", "d8"],
        }
    ]
    assert "secret" not in repr(logs)


def test_many_foreign_documents_make_one_aggregated_log_line() -> None:
    """A trace with 1,000 foreign documents counts 1,000 violations and logs one line
    naming the first few ids."""
    d, registry = detector()
    contexts = tuple(Context(f"g{i}", text="globex secret", tenant="globex") for i in range(1000))
    with capture_logs() as logs:
        for trace_id in ("t1", "t2"):
            d.observe(make_trace(trace_id, contexts=contexts))
    assert sample(registry, "rag_entitlement_violations_total") == 2000
    errors = [e for e in logs if e["event"] == "entitlement_violation"]
    assert [(e["trace_id"], e["foreign_documents"]) for e in errors] == [("t1", 1000), ("t2", 1000)]
    assert errors[0]["doc_ids"] == ["g0", "g1", "g2", "g3", "g4"]
    assert "secret" not in repr(logs)


# --- golden set and config ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "error"),
    [
        (
            '{"probe_id": "q1", "gold_doc_ids": ["d1"]}\n{"probe_id": "q1", "gold_doc_ids": ["d2"]}\n',
            ":2: probe_id 'q1' appears twice",
        ),
        ('{"trace_id": "ab", "gold_doc_ids": ["d1"]}\n', ":1: expected one object with probe_id"),
        ('{"probe_id": "q1", "gold_doc_ids": []}\n', ":1: gold_doc_ids"),
        ('\n{"probe_id": "q1"\n', ":2: invalid JSON"),
    ],
    ids=["duplicate-probe", "trace-label", "empty-gold", "malformed-json"],
)
def test_golden_set_errors_name_file_and_line(tmp_path: Path, content: str, error: str) -> None:
    """A bad golden set fails at start-up with the key, the file and the line."""
    path = tmp_path / "golden.jsonl"
    path.write_text(content)
    with pytest.raises(GoldenSetError, match=r"detectors\.filter_exclusion\.golden_set") as raised:
        load_golden_set(path)
    assert f"{path}{error}" in str(raised.value)


def test_golden_set_loads_probes_and_ignores_extra_keys(tmp_path: Path) -> None:
    """Blank lines are skipped; a query text beside the gold (for the replayer) is ignored."""
    path = tmp_path / "golden.jsonl"
    path.write_text(
        '{"probe_id": "q1", "query": "refunds?", "gold_doc_ids": ["d1", "d1", "d2"]}\n\n'
    )
    assert load_golden_set(path) == {"q1": frozenset({"d1", "d2"})}
    with pytest.raises(GoldenSetError, match="cannot read"):
        detector(golden_set=tmp_path / "missing.jsonl")


@pytest.mark.parametrize(
    ("value", "error"),
    [("[5, 5]", "duplicate k"), ("[0, 10]", "positive"), ("[]", "positive")],
    ids=["duplicate", "zero", "empty"],
)
def test_recall_k_rejects_duplicates_and_non_positive(value: str, error: str) -> None:
    """recall_k must hold distinct positive k; the error names the key."""
    with pytest.raises(ConfigError, match=f"detectors.filter_exclusion.recall_k: .*{error}"):
        load_config(None, {"RAG_MONITOR_DETECTORS__FILTER_EXCLUSION__RECALL_K": value})
