"""Per-stage latency: histograms for fleet-wide quantiles, window quantile gauges per replica.

``rag_stage_latency_seconds{stage,variant}`` is a histogram that Prometheus can sum
across replicas. ``rag_stage_latency_window_seconds{stage,quantile}`` is the
quantile of the last ``window_s`` seconds of production traffic from DDSketch
(relative accuracy 0.5%): the window is cut into slots, each slot holds one sketch per stage, and
a scrape merges the slots still inside the window.

Only the stages a trace has are observed: a missing stage is never a duration of 0. A trace
without a stage that has a latency SLO (``guardrails.latency_slo``; total is the request's
own duration) is counted as a missing input (``stage_<stage>``): the SLO cannot see it.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import ClassVar

from ddsketch import DDSketch
from prometheus_client import Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from detectors.latency.config import LatencyConfig
from detectors.latency.names import STAGE_LATENCY_SECONDS, STAGE_LATENCY_WINDOW_SECONDS
from monitor.contract.buckets import LATENCY_BUCKETS
from monitor.contract.detector import InlineDetector
from monitor.contract.field_presence import stage_field
from monitor.contract.missing import MissingInputs
from monitor.contract.names import SLICE_LATENCY_REQUESTS_TOTAL, SLICE_LATENCY_SLOW_TOTAL
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.slicing import SliceCounter, Slicer
from monitor.contract.trace import STAGES, RagTrace
from monitor.contract.variants import PRODUCTION, ByVariant, variant_of

RELATIVE_ACCURACY = 0.005
_SLOTS_PER_WINDOW = 20


class SlidingQuantiles(Collector):
    """Quantiles per stage over the last ``window_s`` seconds, exported at scrape time."""

    def __init__(
        self,
        window_s: float,
        quantiles: list[float],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._slot_s = window_s / _SLOTS_PER_WINDOW
        self._quantiles = quantiles
        self._clock = clock
        self._lock = threading.Lock()
        # (slot number, sketch per stage), oldest first; one slot more than the
        # window so that a full window is covered between slot boundaries.
        self._slots: deque[tuple[int, dict[str, DDSketch]]] = deque(maxlen=_SLOTS_PER_WINDOW + 1)

    def add(self, durations: Iterable[tuple[str, float]]) -> None:
        """One trace's (stage, seconds): one clock reading and one lock for them all."""
        slot = int(self._clock() // self._slot_s)
        with self._lock:
            if not self._slots or self._slots[-1][0] != slot:
                self._slots.append((slot, {}))
            sketches = self._slots[-1][1]
            for stage, seconds in durations:
                sketch = sketches.get(stage)
                if sketch is None:
                    sketch = sketches[stage] = DDSketch(relative_accuracy=RELATIVE_ACCURACY)
                sketch.add(seconds)

    def quantile(self, stage: str, q: float) -> float | None:
        merged = self._merged().get(stage)
        return None if merged is None else merged.get_quantile_value(q)

    def _merged(self) -> dict[str, DDSketch]:
        oldest = int(self._clock() // self._slot_s) - _SLOTS_PER_WINDOW
        merged: dict[str, DDSketch] = {}
        with self._lock:
            for slot, sketches in self._slots:
                if slot < oldest:
                    continue
                for stage, sketch in sketches.items():
                    into = merged.get(stage)
                    if into is None:
                        into = merged[stage] = DDSketch(relative_accuracy=RELATIVE_ACCURACY)
                    into.merge(sketch)
        return merged

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            STAGE_LATENCY_WINDOW_SECONDS,
            "Stage latency quantile over the sliding window (per replica; DDSketch, 0.5%).",
            labels=["stage", "quantile"],
        )
        for stage, sketch in sorted(self._merged().items()):
            for q in self._quantiles:
                value = sketch.get_quantile_value(q)
                if value is not None:
                    family.add_metric([stage, str(q)], value)
        yield family


class LatencyDetector(InlineDetector):
    """Observes each traced stage's duration into the histogram and the window sketches."""

    name: ClassVar[str] = "latency"

    def __init__(
        self,
        config: LatencyConfig,
        registry: SidecarRegistry,
        clock: Callable[[], float] = time.monotonic,
        slo_stages: Mapping[str, float] | None = None,
        slicer: Slicer | None = None,
    ) -> None:
        """``slo_stages``: the stages with a latency SLO, each with its threshold_s where the
        slices count the requests slower than it (``slicer``)."""
        histogram = Histogram(
            STAGE_LATENCY_SECONDS,
            "Duration of each RAG pipeline stage (ttft: time to first token), by variant.",
            ["stage", "variant"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._by_stage: dict[str, ByVariant[Histogram]] = {
            stage: ByVariant(functools.partial(histogram.labels, stage)) for stage in STAGES
        }
        self.window = SlidingQuantiles(config.window_s, config.quantiles, clock)
        registry.register(self.window)
        # Every request has its total; the other SLO stages only when their spans were found.
        self._slo_thresholds = dict(slo_stages or {})
        self._watched = [stage for stage in self._slo_thresholds if stage != "total"]
        self._missing = MissingInputs(registry, self.name, map(stage_field, self._watched))
        self._slicer = slicer or Slicer()
        self._slice_requests = SliceCounter(
            self._slicer,
            SLICE_LATENCY_REQUESTS_TOTAL,
            "Production requests with a latency-SLO stage, by slice and stage.",
            registry,
            ["stage"],
        )
        self._slice_slow = SliceCounter(
            self._slicer,
            SLICE_LATENCY_SLOW_TOTAL,
            "Production requests slower than the stage's SLO threshold_s, by slice and stage.",
            registry,
            ["stage"],
        )

    def observe(self, trace: RagTrace) -> None:
        variant = variant_of(trace)
        observed = []
        for stage, seconds in trace.stages.items():
            children = self._by_stage.get(stage)
            if children is not None:
                children[variant].observe(seconds)
                observed.append((stage, seconds))
        # The per-replica window quantiles describe what users are served.
        if variant == PRODUCTION and observed:
            self.window.add(observed)
            if self._slicer.enabled:
                self._count_slices(trace)
        for stage in self._watched:
            if stage not in trace.stages:
                self._missing.count(stage_field(stage))

    def _count_slices(self, trace: RagTrace) -> None:
        slices = self._slicer.of(trace)
        for stage, threshold_s in self._slo_thresholds.items():
            seconds = trace.stages.get(stage)
            if seconds is None:
                continue
            self._slice_requests.inc(slices, stage)
            # Counted at 0 too: a slice without a slow request records a share of 0, not
            # nothing. The SLO counts a request at its bound as fast.
            self._slice_slow.inc(slices, stage, amount=float(seconds > threshold_s))
