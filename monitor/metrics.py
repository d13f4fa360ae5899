"""Metrics that several components of one registry share.

prometheus_client refuses a second registration of a name, so a metric that
more than one component writes (each sampler's counts, every detector's up
gauge) is created once per registry here and handed out again after that.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge

from monitor.names import DETECTOR_UP, QUEUE_DEPTH, SAMPLES_TOTAL

_Metric = TypeVar("_Metric", Counter, Gauge)
_shared: weakref.WeakKeyDictionary[CollectorRegistry, dict[str, Any]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def shared_metric(
    registry: CollectorRegistry,
    kind: type[_Metric],
    name: str,
    documentation: str,
    labelnames: Sequence[str],
) -> _Metric:
    """The metric ``name`` of ``registry``, registered on first use and reused after."""
    with _lock:
        metrics = _shared.setdefault(registry, {})
        if name not in metrics:
            metrics[name] = kind(name, documentation, labelnames, registry=registry)
        metric: _Metric = metrics[name]
        return metric


def detector_up(registry: CollectorRegistry) -> Gauge:
    """``rag_monitor_detector_up{detector}``: 1 when a detector can do its work, else 0."""
    return shared_metric(
        registry,
        Gauge,
        DETECTOR_UP,
        "1 when the detector is working; 0 when it cannot (for example, its model is "
        "missing: the log says how to fetch it).",
        ["detector"],
    )


def samples_counter(registry: CollectorRegistry) -> Counter:
    """``rag_monitor_samples_total{detector,outcome}``: what the samplers queued, settled
    or dropped."""
    return shared_metric(
        registry,
        Counter,
        SAMPLES_TOTAL,
        "Traces taken for an expensive detector: queued, settled inline (the detector "
        "needed no work, e.g. no evidence to score), or dropped because its queue was full "
        "or its max_per_second budget was spent.",
        ["detector", "outcome"],
    )


def queue_depth(registry: CollectorRegistry) -> Gauge:
    """``rag_monitor_queue_depth{queue}``: items waiting in each bounded queue."""
    return shared_metric(registry, Gauge, QUEUE_DEPTH, "Items waiting in a queue.", ["queue"])
