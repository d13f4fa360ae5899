"""User feedback: ``rag_feedback_events_total{kind}``, with re-asks counted as regenerations.

Regeneration has two sources: an explicit ``regenerate`` event, and the same
query asked again in the same session within ``REASK_WINDOW_S`` (the user
re-asking is the implicit form of pressing "regenerate"). Only a hash of the
session and normalized query is kept, in a bounded map: never the text.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from typing import ClassVar, get_args

from prometheus_client import CollectorRegistry, Counter

from detectors.feedback.names import FEEDBACK_EVENTS_TOTAL
from monitor.detector import InlineDetector
from monitor.trace import Event, Feedback, FeedbackKind, RagTrace

REASK_WINDOW_S = 60.0
MAX_TRACKED_QUERIES = 100_000


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
        self._by_kind = {kind: counter.labels(kind) for kind in get_args(FeedbackKind)}
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
        if isinstance(event, Feedback):
            self._by_kind[event.kind].inc()
