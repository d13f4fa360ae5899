"""Intent and document-type slices: the regeneration rate by intent and the coverage matrix.

``rag.intent`` and a context metadata key (``document_type_key``) become the labels
``intent`` and ``document_type`` through their allow-lists (``monitor.contract.variants.
bounded_label``): an unlisted value is ``other``, a missing one ``none``; never free text.

- ``rag_slice_requests_total{intent,variant}``: every request.
- ``rag_slice_regenerations_total{intent,variant}``: regenerate feedback and re-asks
  (``monitor/contract/reask.py``), as the feedback detector counts them globally. A feedback event
  names only its trace: the intent comes from a bounded map of recent traces
  (``max_tracked_traces``, ``feedback_ttl_s``); an event whose trace is not there (another
  replica's, evicted or expired) is counted in ``rag_slice_unmatched_feedback_total``.
- ``rag_coverage_requests_total{intent,document_type}``: production requests, once per
  distinct document type among their contexts (``none``: no context names a type).
  Every cell of the configured lists exists from the start, so empty cells show as 0.
"""

from __future__ import annotations

import functools
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import ClassVar

from prometheus_client import Counter

from detectors.slices.config import SlicesConfig
from detectors.slices.names import (
    COVERAGE_REQUESTS_TOTAL,
    SLICE_EVICTED_TRACES_TOTAL,
    SLICE_REGENERATIONS_TOTAL,
    SLICE_REQUESTS_TOTAL,
    SLICE_UNMATCHED_FEEDBACK_TOTAL,
)
from monitor.contract.detector import InlineDetector
from monitor.contract.reask import ReaskTracker
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import DOCUMENT_TYPE, INTENT
from monitor.contract.trace import Event, Feedback, RagTrace
from monitor.contract.variants import PRODUCTION, variant_of


class SlicesDetector(InlineDetector):
    """Counts requests and regenerations by intent, and requests by intent x document type."""

    name: ClassVar[str] = "slices"

    def __init__(
        self,
        config: SlicesConfig,
        registry: SidecarRegistry,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._slicer = slicer = config.slicer()
        self.enabled = slicer.enabled
        self._max_tracked = config.max_tracked_traces
        self._ttl_s = config.feedback_ttl_s
        self._clock = clock
        # trace id -> (seen at, intent, variant), oldest first
        self._recent: OrderedDict[str, tuple[float, str, str]] = OrderedDict()
        self._reasks = ReaskTracker(config.max_tracked_traces)
        if not self.enabled:
            return  # no series at all

        def children(name: str, documentation: str, labels: list[str]) -> Callable[..., Counter]:
            # labels() once per label set: the inputs are bounded, so the cache is too.
            counter = Counter(name, documentation, labels, registry=registry)
            return functools.cache(counter.labels)

        self._requests = children(
            SLICE_REQUESTS_TOTAL,
            "RAG requests by intent (detectors.slices.intents) and variant.",
            ["intent", "variant"],
        )
        self._regenerations = children(
            SLICE_REGENERATIONS_TOTAL,
            "Regenerate events and same-session re-asks by the intent of their request.",
            ["intent", "variant"],
        )
        self._coverage = children(
            COVERAGE_REQUESTS_TOTAL,
            "Production requests by intent and each distinct document type among their "
            "contexts (none: no context names a type).",
            ["intent", "document_type"],
        )
        self._unmatched = Counter(
            SLICE_UNMATCHED_FEEDBACK_TOTAL,
            "Regenerate events whose trace this replica does not hold (not processed yet, another "
            "replica's, evicted or older than feedback_ttl_s): not sliced.",
            registry=registry,
        )
        self._evicted = Counter(
            SLICE_EVICTED_TRACES_TOTAL,
            "Traces dropped from the intent map before feedback_ttl_s (max_tracked_traces).",
            registry=registry,
        )
        values = slicer.values
        for intent in values[INTENT]:
            self._requests(intent, PRODUCTION)
            self._regenerations(intent, PRODUCTION)
            for document_type in values[DOCUMENT_TYPE]:
                self._coverage(intent, document_type)

    def observe(self, trace: RagTrace) -> None:
        if not self.enabled:
            return
        intent = self._slicer.intent(trace)
        variant = variant_of(trace)
        self._requests(intent, variant).inc()
        if self._reasks.is_reask(trace):
            self._regenerations(intent, variant).inc()
        self._remember(trace.trace_id, intent, variant)
        if variant == PRODUCTION:  # a shadow twin would count its request's cell twice
            for document_type in self._slicer.document_types_of(trace):
                self._coverage(intent, document_type).inc()

    def observe_event(self, event: Event) -> None:
        if not self.enabled or not isinstance(event, Feedback) or event.kind != "regenerate":
            return
        self._expire()
        seen = self._recent.get(event.trace_id)
        if seen is None:
            self._unmatched.inc()
            return
        _, intent, variant = seen
        self._regenerations(intent, variant).inc()

    def _remember(self, trace_id: str, intent: str, variant: str) -> None:
        self._recent.pop(trace_id, None)
        self._recent[trace_id] = (self._clock(), intent, variant)
        self._expire()
        if len(self._recent) > self._max_tracked:
            self._recent.popitem(last=False)
            self._evicted.inc()

    def _expire(self) -> None:
        oldest = self._clock() - self._ttl_s
        while self._recent:
            trace_id, (seen_at, _, _) = next(iter(self._recent.items()))
            if seen_at >= oldest:
                return
            del self._recent[trace_id]
