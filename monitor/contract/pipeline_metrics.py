"""The sidecar's own counters of the intake and the pipeline, shared by the collectors
(through ``Consumer.metrics``) and the pipeline, and the label values they count by."""

from __future__ import annotations

import functools
from collections.abc import Collection
from typing import Literal, get_args

from prometheus_client import Counter, Gauge

from monitor.contract.field_presence import DEFAULT_INSTRUMENTATIONS, FieldCoverage
from monitor.contract.metrics import queue_depth
from monitor.contract.names import (
    ASSEMBLED_TRACES_TOTAL,
    DETECTOR_ERRORS_TOTAL,
    EVENTS_TOTAL,
    LATE_SPANS_TOTAL,
    PENDING_TRACES,
    RECORDS_TOTAL,
    REFUSED_SPANS_TOTAL,
    REJECTED_SPANS_TOTAL,
    REQUESTS_TOTAL,
)
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Source
from monitor.contract.variants import DEFAULT_VARIANTS, ByVariant, VariantFolding

RecordOutcome = Literal["ok", "invalid", "dead_lettered", "skipped", "duplicate"]
# Where a work item came from: a collector, or a detector emitting events through the core
# (``BuildContext.emit``: HHEM scores, review labels), counted as ``internal``.
Origin = Literal["otlp", "kafka", "internal"]
TraceOutcome = Literal["complete", "expired", "evicted", "not_rag"]


class PipelineMetrics:
    """The sidecar's own counters, shared by the collectors and the pipeline."""

    def __init__(
        self,
        registry: SidecarRegistry,
        variants: Collection[str] = DEFAULT_VARIANTS,
        instrumentations: Collection[str] = DEFAULT_INSTRUMENTATIONS,
    ) -> None:
        self.registry = registry  # the pipeline's worker reports to its supervisor
        self.variants = VariantFolding(variants, registry)
        self.coverage = FieldCoverage(registry, instrumentations)
        requests = Counter(
            REQUESTS_TOTAL,
            "RAG requests seen, by source and variant (service.variants).",
            ["source", "variant"],
            registry=registry,
        )
        # Children bound once: a labels() lookup per trace shows in the ingest profile.
        self.requests = {
            source: ByVariant(functools.partial(requests.labels, source))
            for source in get_args(Source)
        }
        self.records = Counter(
            RECORDS_TOTAL,
            "Records (OTLP requests, Kafka records) by collector and outcome.",
            ["collector", "outcome"],
            registry=registry,
        )
        self.queue_depth = queue_depth(registry)
        traces = Counter(
            ASSEMBLED_TRACES_TOTAL,
            "Traces emitted by span assembly: complete (root + grace), expired (TTL), "
            "evicted (over max_pending_traces); not_rag: no RAG request (index building, "
            "embedding batches, health checks), handed to no detector.",
            ["outcome"],
            registry=registry,
        )
        self.traces = {outcome: traces.labels(outcome) for outcome in get_args(TraceOutcome)}
        self.pending = Gauge(PENDING_TRACES, "Traces held by span assembly.", registry=registry)
        self.late_spans = Counter(
            LATE_SPANS_TOTAL,
            "Spans dropped because their trace had already been emitted.",
            registry=registry,
        )
        self.refused_spans = _refused_spans(registry)
        self.rejected_spans = Counter(
            REJECTED_SPANS_TOTAL,
            "Spans refused by validation.",
            ["collector"],
            registry=registry,
        )
        self.events = Counter(
            EVENTS_TOTAL,
            "Events handed to the detectors, by type: label, feedback, judge_score, "
            "unscored_answer, exclusion_outcome, evaluation_result.",
            ["type"],
            registry=registry,
        )
        self.detector_errors = Counter(
            DETECTOR_ERRORS_TOTAL,
            "Exceptions raised by a detector (the trace is still counted).",
            ["detector"],
            registry=registry,
        )

    def count_record(self, collector: Origin, outcome: RecordOutcome) -> None:
        self.records.labels(collector, outcome).inc()


def _refused_spans(registry: SidecarRegistry) -> dict[Source, Counter]:
    """The refused-span counter's one reason, bound per collector (both exist at 0)."""
    refused = Counter(
        REFUSED_SPANS_TOTAL,
        "Spans refused by span assembly, by collector and reason: max_spans_per_trace "
        "(the trace already held collectors.spans.assembly.max_spans_per_trace spans).",
        ["collector", "reason"],
        registry=registry,
    )
    return {source: refused.labels(source, "max_spans_per_trace") for source in get_args(Source)}
