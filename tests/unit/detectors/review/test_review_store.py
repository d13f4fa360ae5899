"""The review store on real SQLite: queue, merge, verdicts, progress, retention, records."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from detectors.review.config import ReviewConfig
from detectors.review.detector import ReviewDetector
from detectors.review.model import ReviewContext, ReviewItem, Stratum, Verdict
from detectors.review.store import (
    ReviewStore,
    item_from_record,
    item_record,
    verdict_from_record,
    verdict_record,
)
from monitor.contract.sidecar_registry import SidecarRegistry
from tests.conftest import sample, wait_until

DAY_S = 86_400.0


class FakeClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def item(trace_id: str, *strata: Stratum, **fields: Any) -> ReviewItem:
    return ReviewItem(
        trace_id=trace_id,
        time=1_699_999_999.0,
        query="q <b>",
        answer="a & b",
        contexts=(ReviewContext("d1", "c1", "text 1"), ReviewContext("d2")),
        tenant="acme",
        strata=strata,
        **fields,
    )


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(tmp_path: Path, clock: FakeClock) -> Iterator[ReviewStore]:
    opened = ReviewStore(tmp_path / "state", clock=clock)
    yield opened
    opened.close()


def test_add_queues_once_and_merges_strata_score_and_feedback(store: ReviewStore) -> None:
    """A second add of a trace returns False and merges its strata, score and feedback."""
    assert store.add(item("a", "random"))
    assert not store.add(item("a", "thumbs_down", hhem_score=0.2, hhem_threshold=0.5))
    held = store.get("a")
    assert held is not None
    assert held.strata == ("random", "thumbs_down")
    assert (held.hhem_score, held.hhem_threshold) == (0.2, 0.5)
    assert held.contexts == (ReviewContext("d1", "c1", "text 1"), ReviewContext("d2"))
    assert held.queued_at == 1_700_000_000.0
    assert store.get("nope") is None


def test_attach_score_and_feedback(store: ReviewStore) -> None:
    """Scores replace, feedback kinds are kept once each; unknown traces are ignored."""
    store.add(item("a", "random"))
    store.attach_score("a", 0.7, 0.5)
    store.attach_score("a", 0.4, 0.5)
    for kind in ("copy", "regenerate", "copy"):
        store.attach_feedback("a", kind)
    store.attach_feedback("unknown", "copy")
    held = store.get("a")
    assert held is not None
    assert (held.hhem_score, held.feedback) == (0.4, ("copy", "regenerate"))


def test_next_unreviewed_is_the_oldest_not_skipped_without_verdict(
    store: ReviewStore, clock: FakeClock
) -> None:
    """Oldest first; a skipped id or a reviewed item is passed over; None when none is left."""
    for name in ("a", "b", "c"):
        store.add(item(name, "random"))
        clock.now += 1
    assert store.next_unreviewed().trace_id == "a"  # type: ignore[union-attr]
    assert store.next_unreviewed(skip=["a"]).trace_id == "b"  # type: ignore[union-attr]
    assert store.record(Verdict("a", "yes")) is not None
    assert store.next_unreviewed().trace_id == "b"  # type: ignore[union-attr]
    assert store.next_unreviewed(skip=["b", "c"]) is None


def test_record_replaces_and_refuses_unknown_items(store: ReviewStore, clock: FakeClock) -> None:
    """A later verdict replaces the first; reviewed() lists each item once with the latest."""
    store.add(item("a", "random"))
    assert store.record(Verdict("unknown", "no")) is None
    store.record(Verdict("a", "no", reason="wrong"))
    clock.now += 5
    returned = store.record(Verdict("a", "partly", relevant_doc_ids=("d1",), note="n"))
    assert returned is not None
    assert returned.trace_id == "a"
    [(reviewed_item, verdict)] = store.reviewed()
    assert reviewed_item.trace_id == "a"
    assert (verdict.supported, verdict.relevant_doc_ids, verdict.reason) == (
        "partly",
        ("d1",),
        None,
    )
    assert verdict.reviewed_at == clock.now


def test_progress_counts_queued_and_reviewed_per_stratum(store: ReviewStore) -> None:
    """An item counts in each of its strata; every stratum is present, zero when empty."""
    store.add(item("a", "random", "thumbs_down"))
    store.add(item("b", "thumbs_down"))
    store.add(item("c", "weekly_reading"))
    store.record(Verdict("a", "yes"))
    progress = store.progress()
    assert progress.queued == {
        "random": 1, "low_faithfulness": 0, "thumbs_down": 2, "follow_up": 0, "weekly_reading": 1,
    }  # fmt: skip
    assert progress.reviewed == {
        "random": 1, "low_faithfulness": 0, "thumbs_down": 1, "follow_up": 0, "weekly_reading": 0,
    }  # fmt: skip


def test_delete_older_than_removes_items_with_their_verdicts(
    store: ReviewStore, clock: FakeClock
) -> None:
    """Items queued before the cutoff go with their verdicts and strata; newer ones stay."""
    store.add(item("old", "random"))
    store.record(Verdict("old", "no"))
    clock.now += 10 * DAY_S
    store.add(item("new", "random"))
    assert store.delete_older_than(clock.now - DAY_S) == 1
    assert store.get("old") is None
    assert store.reviewed() == []
    assert store.progress().queued["random"] == 1
    store.add(item("old", "thumbs_down"))  # queued again: a fresh item, no old verdict
    assert store.get("old").strata == ("thumbs_down",)  # type: ignore[union-attr]


def test_records_round_trip() -> None:
    """Items and verdicts survive their JSON records; a wrong schema is refused."""
    original = item("a", "random", hhem_score=0.3, hhem_threshold=0.5, feedback=("copy",))
    assert item_from_record(item_record(original)) == original
    verdict = Verdict("a", "partly", ("d1",), ("d9",), "incomplete", "note", "ann", 5.0)
    assert verdict_from_record(verdict_record(verdict)) == verdict
    with pytest.raises(ValueError, match="schema"):
        item_from_record({**item_record(original), "schema": "other"})
    with pytest.raises(ValueError, match="known values"):
        verdict_from_record({**verdict_record(verdict), "supported": "maybe"})


def test_store_is_safe_from_many_threads(store: ReviewStore) -> None:
    """Eight threads adding and recording at once leave 800 items, 400 reviewed."""

    def work(worker: int) -> None:
        for i in range(100):
            name = f"{worker}-{i}"
            store.add(item(name, "random"))
            if i % 2:
                store.record(Verdict(name, "yes"))

    threads = [threading.Thread(target=work, args=(w,)) for w in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert store.progress().queued["random"] == 800
    assert len(store.reviewed()) == 400


def test_detector_enforces_retention_days_with_its_clock(tmp_path: Path) -> None:
    """The detector's worker deletes items older than retention_days once the clock passes
    them, and counts the deletions."""
    clock, registry = FakeClock(), SidecarRegistry()
    config = ReviewConfig.model_validate(
        {"enabled": True, "retention_days": 30, "http": {"enabled": False}}
    )
    detector = ReviewDetector(config, registry, tmp_path, clock=clock)
    detector.start()
    try:
        assert detector.store is not None
        detector.store.add(item("a", "random"))
        clock.now += 29 * DAY_S
        detector.store.add(item("b", "random"))
        clock.now += 2 * DAY_S  # "a" is 31 days old, "b" 2 days
        wait_until(lambda: sample(registry, "rag_review_retention_deleted_total") == 1)
        assert detector.store.get("a") is None
        assert detector.store.get("b") is not None
        assert sample(registry, "rag_review_queue_items") == 1
        assert sample(registry, "rag_monitor_state_bytes", file="review.sqlite3") > 0
    finally:
        detector.shutdown()


def test_detector_queues_a_pair_production_half_but_never_its_shadow_twin(
    tmp_path: Path,
) -> None:
    """A shadow twin (a non-production trace with a pair id) was never served: with every
    answer sampled, only the production half of the pair and an unpaired canary are queued."""
    from datetime import UTC, datetime

    from monitor.contract.trace import RagTrace

    config = ReviewConfig.model_validate(
        {"enabled": True, "random_rate": 1.0, "http": {"enabled": False}}
    )
    detector = ReviewDetector(config, SidecarRegistry(), tmp_path)
    detector.start()
    try:
        now = datetime.now(tz=UTC)
        common = {"time": now, "source": "otlp", "query": "q", "answer": "a"}
        detector.observe(RagTrace(trace_id="a1", pair_id="p1", **common))
        detector.observe(RagTrace(trace_id="b2", pair_id="p1", variant="shadow", **common))
        detector.observe(RagTrace(trace_id="c3", variant="canary", **common))
        store = detector.store
        assert store is not None
        wait_until(lambda: store.get("a1") is not None and store.get("c3") is not None)
        assert store.get("b2") is None
    finally:
        detector.shutdown()
