"""User feedback: ``rag_feedback_events_total{kind}``, with re-asks counted as regenerations,
thumbs-down reasons (``rag_feedback_thumbs_down_total{reason}``) and dwell times
(``rag_feedback_dwell_seconds``).

Regeneration has two sources: an explicit ``regenerate`` event, and the same
query asked again in the same session within ``REASK_WINDOW_S`` (the user
re-asking is the implicit form of pressing "regenerate"). Only a hash of the
session and normalized query is kept, in a bounded map: never the text. An
explicit ``re_ask`` event is counted as its own kind: the app's notion of asking
again (a rephrased question, say) is not the sidecar's same-query re-ask, and
counting it as a regeneration too could count one re-ask twice.

Every label value comes from a closed set (the kinds and reasons of
``monitor/trace.py``): the collectors refuse anything else.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import ClassVar

from prometheus_client import CollectorRegistry, Counter, Histogram

from detectors.feedback.names import (
    FEEDBACK_DWELL_SECONDS,
    FEEDBACK_EVENTS_TOTAL,
    FEEDBACK_THUMBS_DOWN_TOTAL,
)
from monitor.detector import InlineDetector
from monitor.trace import FEEDBACK_KINDS, FEEDBACK_REASONS, Event, Feedback, RagTrace

REASK_WINDOW_S = 60.0
MAX_TRACKED_QUERIES = 100_000
# From a glance to an hour of reading; longer dwells (up to a day) land in +Inf.
DWELL_BUCKETS_S = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
NO_REASON = "unspecified"  # the reason label of a thumbs-down sent without one


def normalize_query(query: str) -> str:
    """Case and whitespace do not make a different question."""
    return " ".join(query.casefold().split())


class FeedbackDetector(InlineDetector):
    """Counts feedback events by kind and detects re-asks within one session."""

    name: ClassVar[str] = "feedback"

    def __init__(self, registry: CollectorRegistry, max_tracked: int = MAX_TRACKED_QUERIES) -> None:
        counter = Counter(
            FEEDBACK_EVENTS_TOTAL,
            "Feedback events by kind; regenerate includes re-asks of the same query "
            f"in one session within {REASK_WINDOW_S:.0f} s.",
            ["kind"],
            registry=registry,
        )
        self._by_kind = {kind: counter.labels(kind) for kind in FEEDBACK_KINDS}
        reasons = Counter(
            FEEDBACK_THUMBS_DOWN_TOTAL,
            f"Thumbs-down events by reason category; {NO_REASON} when none was given.",
            ["reason"],
            registry=registry,
        )
        self._by_reason = {r: reasons.labels(r) for r in (*FEEDBACK_REASONS, NO_REASON)}
        self._dwell = Histogram(
            FEEDBACK_DWELL_SECONDS,
            "Seconds users spent on an answer, from dwell feedback events.",
            buckets=DWELL_BUCKETS_S,
            registry=registry,
        )
        self._last_asked: OrderedDict[bytes, float] = OrderedDict()
        self._max_tracked = max_tracked

    def observe(self, trace: RagTrace) -> None:
        if not trace.session_id or not trace.query:
            return
        key = hashlib.blake2b(
            f"{trace.session_id}\0{normalize_query(trace.query)}".encode(), digest_size=16
        ).digest()
        asked_at = trace.time.timestamp()
        previous = self._last_asked.pop(key, None)
        if previous is not None and 0 <= asked_at - previous <= REASK_WINDOW_S:
            self._by_kind["regenerate"].inc()
        self._last_asked[key] = asked_at
        if len(self._last_asked) > self._max_tracked:
            self._last_asked.popitem(last=False)

    def observe_event(self, event: Event) -> None:
        if not isinstance(event, Feedback):
            return
        self._by_kind[event.kind].inc()
        if event.kind == "thumbs_down":
            self._by_reason[event.reason or NO_REASON].inc()
        elif event.kind == "dwell" and event.dwell_seconds is not None:
            self._dwell.observe(event.dwell_seconds)
