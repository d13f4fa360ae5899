"""Feedback kinds of the method (click, dwell, share, export, re_ask, thumbs with a reason):
parsed or refused at the edge, counted under bounded labels by the feedback detector."""

from __future__ import annotations

import math
from typing import Any

import orjson
import pytest

from detectors.feedback.alerting import rows
from detectors.feedback.detector import DWELL_BUCKETS_S, NO_REASON, FeedbackDetector
from monitor.contract.events import InvalidRecord, parse_feedback
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import FEEDBACK_KINDS, FEEDBACK_REASONS, Feedback
from tests.conftest import sample


def _body(*records: dict[str, Any]) -> bytes:
    return orjson.dumps(records[0] if len(records) == 1 else list(records))


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"kind": "share"}, Feedback("t1", "share")),
        ({"kind": "export"}, Feedback("t1", "export")),
        ({"kind": "re_ask", "session_id": "s1"}, Feedback("t1", "re_ask", session_id="s1")),
        ({"kind": "click", "doc_id": "d7"}, Feedback("t1", "click", doc_id="d7")),
        ({"kind": "dwell", "dwell_seconds": 12.5}, Feedback("t1", "dwell", dwell_seconds=12.5)),
        ({"kind": "dwell", "dwell_seconds": 0}, Feedback("t1", "dwell", dwell_seconds=0.0)),
        ({"kind": "dwell", "dwell_seconds": 86_400}, Feedback("t1", "dwell", dwell_seconds=86_400)),
        ({"kind": "thumbs_down", "reason": "off_topic"}, Feedback("t1", "thumbs_down", "off_topic")),
        ({"kind": "thumbs_down"}, Feedback("t1", "thumbs_down")),
    ],
    ids=["share", "export", "re-ask", "click", "dwell", "dwell-zero", "dwell-a-day",
         "thumbs-down-reason", "thumbs-down-no-reason"],
)  # fmt: skip
def test_each_new_kind_parses_with_its_field(record: dict[str, Any], expected: Feedback) -> None:
    """Every kind becomes a Feedback carrying the field that belongs to it."""
    assert parse_feedback(_body({"trace_id": "t1", **record})) == [expected]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"kind": "like"}, "kind"),
        ({"kind": "click"}, "doc_id is required with kind click"),
        ({"kind": "click", "doc_id": ""}, "doc_id"),
        ({"kind": "click", "doc_id": "d" * 257}, "doc_id"),
        ({"kind": "copy", "doc_id": "d1"}, "doc_id is only allowed with kind click"),
        ({"kind": "dwell"}, "dwell_seconds is required with kind dwell"),
        ({"kind": "dwell", "dwell_seconds": -0.5}, "dwell_seconds"),
        ({"kind": "dwell", "dwell_seconds": 86_400.5}, "dwell_seconds"),
        ({"kind": "dwell", "dwell_seconds": "12"}, "dwell_seconds"),
        ({"kind": "dwell", "dwell_seconds": True}, "dwell_seconds"),
        ({"kind": "share", "dwell_seconds": 3}, "dwell_seconds is only allowed with kind dwell"),
        ({"kind": "thumbs_down", "reason": "wrong refund period"}, "reason"),
        ({"kind": "thumbs_up", "reason": "wrong"}, "reason is only allowed with kind thumbs_down"),
        ({"kind": "share", "session_id": "s" * 257}, "session_id"),
    ],
    ids=["unknown-kind", "click-no-doc", "click-empty-doc", "click-long-doc", "doc-on-copy",
         "dwell-missing", "dwell-negative", "dwell-over-a-day", "dwell-string", "dwell-bool",
         "dwell-on-share", "unknown-reason", "reason-on-thumbs-up", "long-session"],
)  # fmt: skip
def test_bad_values_are_refused_naming_the_field(record: dict[str, Any], message: str) -> None:
    """A wrong kind, a missing or misplaced field, or an out-of-range value is an InvalidRecord."""
    with pytest.raises(InvalidRecord, match=message):
        parse_feedback(_body({"trace_id": "t1", **record}))


@pytest.mark.parametrize(
    "body",
    [
        b'{"trace_id": "t1", "kind": "dwell", "dwell_seconds": NaN}',
        b'{"trace_id": "t1", "kind": "dwell", "dwell_seconds": Infinity}',
        b'{"trace_id": "t1", "kind": "dwell", "dwell_seconds": 1e400}',
    ],
    ids=["nan", "infinity", "overflow"],
)
def test_non_finite_dwell_is_refused(body: bytes) -> None:
    """NaN and infinite dwell times never reach the histogram."""
    with pytest.raises(InvalidRecord):
        parse_feedback(body)


def test_one_bad_record_refuses_the_whole_batch_as_before() -> None:
    """A list is all or nothing (the client or the dead-letter topic keeps every record)."""
    good = {"trace_id": "t1", "kind": "click", "doc_id": "d1"}
    bad = {"trace_id": "t2", "kind": "dwell", "dwell_seconds": -1}
    with pytest.raises(InvalidRecord, match=r"1\.dwell_seconds"):
        parse_feedback(_body(good, bad))
    assert len(parse_feedback(_body(good, good))) == 2


def test_detector_counts_every_kind_reasons_and_dwell() -> None:
    """Kinds count under kind, thumbs-down under reason (unspecified without one), dwell in the histogram."""
    registry = SidecarRegistry()
    detector = FeedbackDetector(registry)
    events = [
        Feedback("t", "thumbs_down", reason="wrong"),
        Feedback("t", "thumbs_down", reason="wrong"),
        Feedback("t", "thumbs_down", reason="slow"),
        Feedback("t", "thumbs_down"),
        Feedback("t", "click", doc_id="d1"),
        Feedback("t", "dwell", dwell_seconds=3.0),
        Feedback("t", "dwell", dwell_seconds=45.0),
        Feedback("t", "dwell", dwell_seconds=7200.0),
        Feedback("t", "share"),
        Feedback("t", "export"),
        Feedback("t", "re_ask"),
    ]
    for event in events:
        detector.observe_event(event)
    counts = {
        kind: sample(registry, "rag_feedback_events_total", kind=kind) for kind in FEEDBACK_KINDS
    }
    assert counts == {"thumbs_up": 0, "thumbs_down": 4, "regenerate": 0, "copy": 0, "click": 1,
                      "dwell": 3, "share": 1, "export": 1, "re_ask": 1}  # fmt: skip
    reasons = {
        reason: sample(registry, "rag_feedback_thumbs_down_total", reason=reason)
        for reason in (*FEEDBACK_REASONS, NO_REASON)
    }
    assert reasons == {"wrong": 2, "incomplete": 0, "off_topic": 0, "harmful": 0, "slow": 1,
                       "other": 0, NO_REASON: 1}  # fmt: skip
    assert sample(registry, "rag_feedback_dwell_seconds_count") == 3
    assert sample(registry, "rag_feedback_dwell_seconds_sum") == 7248.0
    assert sample(registry, "rag_feedback_dwell_seconds_bucket", le="5.0") == 1
    assert sample(registry, "rag_feedback_dwell_seconds_bucket", le="60.0") == 2
    assert sample(registry, "rag_feedback_dwell_seconds_bucket", le="3600.0") == 2
    assert sample(registry, "rag_feedback_dwell_seconds_bucket", le="+Inf") == 3


def test_label_sets_are_bounded_and_preset() -> None:
    """Every label value exists at zero (variant production) before any event, and no other
    appears."""
    registry = SidecarRegistry()
    FeedbackDetector(registry)
    labels = {
        (metric.name, tuple(sorted(s.labels.items())))
        for metric in registry.collect()
        for s in metric.samples
        if s.name.endswith("_total")
    }
    production = ("variant", "production")
    kinds = {("rag_feedback_events", (("kind", k), production)) for k in FEEDBACK_KINDS}
    reasons = {
        ("rag_feedback_thumbs_down", (("reason", r), production))
        for r in (*FEEDBACK_REASONS, NO_REASON)
    }
    assert labels == kinds | reasons
    assert tuple(sorted(DWELL_BUCKETS_S)) == DWELL_BUCKETS_S
    assert all(math.isfinite(b) and b > 0 for b in DWELL_BUCKETS_S)


def test_panels_show_reasons_and_dwell_quantiles() -> None:
    """The dashboard has a thumbs-down-by-reason panel and dwell p50/p90 from the histogram."""
    panels = {p.title: p for row in rows(None, GuardrailsConfig()) for p in row.panels}
    [(reasons, legend)] = panels["Thumbs-down by reason"].queries
    assert "rag_feedback_thumbs_down_total" in reasons
    assert legend == "{{reason}}"
    dwell = panels["Dwell time on answers"]
    assert [legend for _, legend in dwell.queries] == ["p50", "p90"]
    assert all("rag_feedback_dwell_seconds_bucket" in query for query, _ in dwell.queries)
    assert dwell.unit == "s"
