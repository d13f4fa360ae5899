"""User feedback: ``rag_feedback_events_total{kind,variant}``, with re-asks counted as
regenerations, thumbs-down reasons (``rag_feedback_thumbs_down_total{reason,variant}``) and
dwell times (``rag_feedback_dwell_seconds``). A feedback event names only its trace: it
counts under the variant this replica saw that trace with, else production.

Regeneration has two sources: an explicit ``regenerate`` event, and the same
query asked again in the same session within ``REASK_WINDOW_S`` (``monitor/contract/reask.py``:
the user re-asking is the implicit form of pressing "regenerate"). An
explicit ``re_ask`` event is counted as its own kind: the app's notion of asking
again (a rephrased question, say) is not the sidecar's same-query re-ask, and
counting it as a regeneration too could count one re-ask twice.

Every label value comes from a closed set (the kinds and reasons of
``monitor/contract/trace.py``): the collectors refuse anything else.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import ClassVar

from prometheus_client import Counter, Histogram

from detectors.feedback.names import (
    FEEDBACK_DWELL_SECONDS,
    FEEDBACK_EVENTS_TOTAL,
    FEEDBACK_THUMBS_DOWN_TOTAL,
)
from monitor.contract.detector import InlineDetector
from monitor.contract.reask import MAX_TRACKED_QUERIES, REASK_WINDOW_S, ReaskTracker
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import FEEDBACK_KINDS, FEEDBACK_REASONS, Event, Feedback, RagTrace
from monitor.contract.variants import PRODUCTION, ByVariant, variant_of

# From a glance to an hour of reading; longer dwells (up to a day) land in +Inf.
DWELL_BUCKETS_S = (1, 2, 5, 10, 20, 30, 60, 120, 300, 600, 1800, 3600)
NO_REASON = "unspecified"  # the reason label of a thumbs-down sent without one


class FeedbackDetector(InlineDetector):
    """Counts feedback events by kind and detects re-asks within one session."""

    name: ClassVar[str] = "feedback"

    def __init__(self, registry: SidecarRegistry, max_tracked: int = MAX_TRACKED_QUERIES) -> None:
        counter = Counter(
            FEEDBACK_EVENTS_TOTAL,
            "Feedback events by kind and variant; regenerate includes re-asks of the same "
            f"query in one session within {REASK_WINDOW_S:.0f} s.",
            ["kind", "variant"],
            registry=registry,
        )
        self._by_kind = {
            kind: ByVariant(functools.partial(counter.labels, kind)) for kind in FEEDBACK_KINDS
        }
        reasons = Counter(
            FEEDBACK_THUMBS_DOWN_TOTAL,
            f"Thumbs-down events by reason category ({NO_REASON} when none was given) and variant.",
            ["reason", "variant"],
            registry=registry,
        )
        self._by_reason = {
            r: ByVariant(functools.partial(reasons.labels, r))
            for r in (*FEEDBACK_REASONS, NO_REASON)
        }
        self._dwell = Histogram(
            FEEDBACK_DWELL_SECONDS,
            "Seconds users spent on an answer, from dwell feedback events.",
            buckets=DWELL_BUCKETS_S,
            registry=registry,
        )
        self.reasks = ReaskTracker(max_tracked)
        # Feedback names only its trace: the variant of recent non-production traces
        # (production is the default, so most traffic takes no room here).
        self._variants: OrderedDict[str, str] = OrderedDict()
        self._max_tracked = max_tracked

    def observe(self, trace: RagTrace) -> None:
        variant = variant_of(trace)
        if variant != PRODUCTION:
            self._variants[trace.trace_id] = variant
            if len(self._variants) > self._max_tracked:
                self._variants.popitem(last=False)
        if self.reasks.is_reask(trace):
            self._by_kind["regenerate"][variant].inc()

    def observe_event(self, event: Event) -> None:
        if not isinstance(event, Feedback):
            return
        variant = self._variants.get(event.trace_id, PRODUCTION)
        self._by_kind[event.kind][variant].inc()
        if event.kind == "thumbs_down":
            self._by_reason[event.reason or NO_REASON][variant].inc()
        elif event.kind == "dwell" and event.dwell_seconds is not None:
            self._dwell.observe(event.dwell_seconds)
