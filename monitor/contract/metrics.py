"""The metric families that components of every kind write, each under its own labels
(``SidecarRegistry.family`` registers each once per sidecar)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from monitor.contract.names import DETECTOR_UP, QUEUE_DEPTH, SAMPLES_TOTAL
from monitor.contract.sidecar_registry import SidecarRegistry


def detector_up(registry: SidecarRegistry) -> Gauge:
    """``rag_monitor_detector_up{detector}``: 1 when a detector can do its work, else 0."""
    return registry.family(
        Gauge,
        DETECTOR_UP,
        "1 when the detector is working; 0 when it cannot (for example, its model is "
        "missing: the log says how to fetch it).",
        ["detector"],
    )


def samples_counter(registry: SidecarRegistry) -> Counter:
    """``rag_monitor_samples_total{detector,outcome}``: what the samplers queued, settled
    or dropped."""
    return registry.family(
        Counter,
        SAMPLES_TOTAL,
        "Traces taken for an expensive detector: queued, settled inline (the detector "
        "needed no work, e.g. no evidence to score), or dropped because its queue was full "
        "or its max_per_second budget was spent.",
        ["detector", "outcome"],
    )


def queue_depth(registry: SidecarRegistry) -> Gauge:
    """``rag_monitor_queue_depth{queue}``: items waiting in each bounded queue."""
    return registry.family(Gauge, QUEUE_DEPTH, "Items waiting in a queue.", ["queue"])
