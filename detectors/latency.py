"""Per-stage latency: ``rag_stage_latency_seconds{stage}`` for every stage a trace has."""

from __future__ import annotations

from typing import ClassVar

from prometheus_client import CollectorRegistry, Histogram

from monitor.config import LatencyConfig
from monitor.trace import STAGES, Event, RagTrace

# 5 ms to 60 s: embedding and rerank calls sit at the low end, long generations
# at the top; about three buckets per decade keep histogram_quantile honest.
LATENCY_BUCKETS = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 7.5, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0,
)  # fmt: skip


class LatencyDetector:
    """Observes each traced stage's duration into a histogram."""

    name: ClassVar[str] = "latency"

    def __init__(self, config: LatencyConfig, registry: CollectorRegistry) -> None:
        self._config = config
        histogram = Histogram(
            "rag_stage_latency_seconds",
            "Duration of each RAG pipeline stage (ttft: time to first token).",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._by_stage: dict[str, Histogram] = {stage: histogram.labels(stage) for stage in STAGES}

    def observe(self, trace: RagTrace) -> None:
        for stage, seconds in trace.stages.items():
            child = self._by_stage.get(stage)
            if child is not None:
                child.observe(seconds)

    def observe_event(self, event: Event) -> None:
        pass

    def start(self) -> None:
        pass

    def shutdown(self) -> None:
        pass
