"""The pipeline: a bounded queue from collectors to one thread that assembles and detects.

Collectors decode and validate on their own threads, then ``submit`` work
items. The pipeline thread owns the trace assembly (which the collectors
provide: spans are their business) and runs the inline detectors, so neither
needs a lock. A full queue makes ``submit`` wait (Kafka)
or time out (OTLP answers "retry later"): intake slows down, nothing is lost.
The pipeline counts the outcome (ok or duplicate) of every item submitted;
collectors count only what they refuse (invalid, dead_lettered).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from monitor.coverage import DEFAULT_INSTRUMENTATIONS, FieldCoverage
from monitor.detector import Detector
from monitor.metrics import queue_depth
from monitor.names import (
    ASSEMBLED_TRACES_TOTAL,
    DETECTOR_ERRORS_TOTAL,
    EVENTS_TOTAL,
    KAFKA_LAG_RECORDS,
    LATE_SPANS_TOTAL,
    PENDING_TRACES,
    RECORDS_TOTAL,
    REFUSED_SPANS_TOTAL,
    REJECTED_SPANS_TOTAL,
    REQUESTS_TOTAL,
)
from monitor.trace import (
    EvaluationResult,
    Event,
    ExclusionOutcome,
    Feedback,
    JudgeScore,
    RagTrace,
    Source,
)
from monitor.variants import DEFAULT_VARIANTS, PRODUCTION, ByVariant, VariantFolding
from monitor.worker import Worker

log = structlog.get_logger("rag_monitor.pipeline")

RecordOutcome = Literal["ok", "invalid", "dead_lettered", "skipped", "duplicate"]
# Where a work item came from: a collector, or a detector emitting events through the core
# (``BuildContext.emit``: HHEM scores, review labels), counted as ``internal``.
Origin = Literal["otlp", "kafka", "internal"]
TraceOutcome = Literal["complete", "expired", "evicted", "not_rag"]
_TICK_S = 0.05
# What is still queued at shutdown is processed for this long, then counted in
# rag_monitor_worker_dropped_total. The stop budget inside Kubernetes' 30 s grace
# period: receivers 5 s, this 12 s, then the detectors' workers in parallel (10 s
# at most: the Phoenix annotator; drift 5 s).
DRAIN_S = 12.0


class Ticket:
    """Follows one source record until every trace it fed has been processed.

    It starts with one hold for the submission itself; each pending trace the
    record adds spans to takes another. ``on_done`` runs when the last is
    released: for Kafka that is when the record's offset may be committed.
    """

    __slots__ = ("_holds", "_on_done")

    def __init__(self, on_done: Callable[[], None] | None = None) -> None:
        self._holds = 1
        self._on_done = on_done

    def hold(self) -> None:
        self._holds += 1

    def release(self) -> None:
        self._holds -= 1
        if self._holds == 0 and self._on_done is not None:
            self._on_done()


@dataclass(frozen=True, slots=True)
class EmittedTrace:
    """A trace the assembly let go: its ``RagTrace`` (None when it is no RAG request or
    could not be built) and the tickets of the records that fed it."""

    trace: RagTrace | None
    outcome: Literal["complete", "expired", "evicted"]
    tickets: list[Ticket]
    failed: bool = False  # the mapping raised; counted as an assembly error
    # The trace's instrumentation scope when it is no RAG request (field coverage counts it).
    instrumentation: str | None = None


@dataclass(frozen=True, slots=True)
class Added:
    """What adding one batch of spans let go and refused."""

    evicted: list[EmittedTrace]  # emitted early to keep the held traces bounded
    late: int = 0  # spans of a trace already emitted
    refused: int = 0  # spans over the per-trace bound (assembly.max_spans_per_trace)


class TraceAssembly(Protocol):
    """Turns the spans collectors submit into traces; called on the pipeline thread only."""

    @property
    def pending(self) -> int:
        """Traces held, waiting for more spans."""

    def add(self, spans: Sequence[Any], source: Source, now: float, ticket: Ticket | None) -> Added:
        """Hold ``spans``; returns the traces evicted to stay bounded and the spans dropped."""

    def claim(self, trace_id: str) -> bool:
        """Mark a trace that arrived whole as seen; False if it was seen before."""

    def due(self, now: float) -> list[EmittedTrace]:
        """Traces complete or expired by ``now``."""

    def drain(self) -> list[EmittedTrace]:
        """Everything held, at shutdown."""


@dataclass(frozen=True, slots=True)
class SpanBatch:
    """Validated spans of one request or record, in the collectors' own span type."""

    spans: Sequence[Any]
    collector: Source
    ticket: Ticket | None = None


@dataclass(frozen=True, slots=True)
class WholeTrace:
    """A trace that arrived complete (``rag-trace/1``)."""

    trace: RagTrace
    ticket: Ticket | None = None

    @property
    def collector(self) -> Source:
        return self.trace.source


@dataclass(frozen=True, slots=True)
class Events:
    """Labels or feedback from one request or record."""

    events: Sequence[Event]
    collector: Origin
    ticket: Ticket | None = None


WorkItem = SpanBatch | WholeTrace | Events


class PipelineMetrics:
    """The sidecar's own counters, shared by the collectors and the pipeline."""

    def __init__(
        self,
        registry: CollectorRegistry,
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
            "Label, feedback, judge-score and exclusion-outcome events handed to the detectors.",
            ["type"],
            registry=registry,
        )
        self.kafka_lag = Gauge(
            KAFKA_LAG_RECORDS,
            "Records of an assigned partition not yet processed and committed (high "
            "watermark - committed offset); each partition is reported by its owner only.",
            ["topic", "partition"],
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


def _refused_spans(registry: CollectorRegistry) -> dict[Source, Counter]:
    """The refused-span counter's one reason, bound per collector (both exist at 0)."""
    refused = Counter(
        REFUSED_SPANS_TOTAL,
        "Spans refused by span assembly, by collector and reason: max_spans_per_trace "
        "(the trace already held assembly.max_spans_per_trace spans).",
        ["collector", "reason"],
        registry=registry,
    )
    return {source: refused.labels(source, "max_spans_per_trace") for source in get_args(Source)}


# The pipeline worker's name, also its thread's: an event emitted on that thread must not
# wait for room in the queue it alone empties (``monitor.components.EventHook``).
PIPELINE_THREAD = "pipeline"


def _event_type(event: Event) -> str:
    if isinstance(event, Feedback):
        return "feedback"
    if isinstance(event, ExclusionOutcome):
        return "exclusion_outcome"
    if isinstance(event, EvaluationResult):
        return "evaluation_result"
    return "judge_score" if isinstance(event, JudgeScore) else "label"


class Consumer(Protocol):
    """What collectors write to: the pipeline, or a sink in tests."""

    metrics: PipelineMetrics

    def submit(self, item: WorkItem, timeout: float | None = None) -> bool:
        """Queue ``item``; False when it could not be queued within ``timeout`` seconds."""


class Pipeline:
    """Bounded queue -> span assembly -> inline detectors."""

    def __init__(
        self,
        assembly: TraceAssembly,
        detectors: Sequence[Detector],
        metrics: PipelineMetrics,
        *,
        queue_size: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.metrics = metrics
        self._detectors = list(detectors)
        self._assembler = assembly
        self._clock = clock
        self._failing: set[str] = set()
        self._worker: Worker[WorkItem] = Worker(
            PIPELINE_THREAD,
            handle=self._handle_batch,
            queue_size=queue_size,
            tick_s=_TICK_S,
            on_tick=self._tick,
            finish=self._drain,
            drain_s=DRAIN_S,
            registry=metrics.registry,
        )
        metrics.queue_depth.labels("ingest").set_function(lambda: self._worker.depth)
        metrics.pending.set_function(lambda: self._assembler.pending)

    def start(self) -> None:
        for detector in self._detectors:
            detector.start()
        self._worker.start()

    def submit(self, item: WorkItem, timeout: float | None = None) -> bool:
        """Queue ``item``; False when the queue stayed full for ``timeout`` seconds, or the
        pipeline stopped or died."""
        return self._worker.submit(item, timeout)

    def alive(self) -> bool:
        """The pipeline thread runs and beats (``/readyz``)."""
        return self._worker.alive()

    def shutdown(self) -> None:
        """Process what is queued (within ``DRAIN_S``), emit every pending trace, stop the
        detectors. Safe before start and twice."""
        self._worker.stop()
        # In parallel, so that the stop takes the longest drain, not the sum of them.
        stoppers = [
            threading.Thread(target=d.shutdown, name=f"stop-{d.name}") for d in self._detectors
        ]
        for stopper in stoppers:
            stopper.start()
        for stopper in stoppers:
            stopper.join()

    def _handle_batch(self, items: list[WorkItem]) -> None:
        for item in items:
            self._handle(item, self._clock())

    def _tick(self) -> None:
        self._process_assembled(self._assembler.due(self._clock()))

    def _drain(self) -> None:
        drained = self._assembler.drain()
        self._process_assembled(drained)
        log.info("pipeline_drained", pending_traces_emitted=len(drained))

    def _handle(self, item: WorkItem, now: float) -> None:
        outcome: RecordOutcome = "ok"
        if isinstance(item, SpanBatch):
            added = self._assembler.add(item.spans, item.collector, now, item.ticket)
            if added.late:
                self.metrics.late_spans.inc(added.late)
            if added.refused:
                self.metrics.refused_spans[item.collector].inc(added.refused)
            self._process_assembled(added.evicted)
        elif isinstance(item, WholeTrace):
            if self._assembler.claim(item.trace.trace_id):
                self._process(item.trace)
            else:
                # The same trace id seen again: a replay after a restart or a retry.
                outcome = "duplicate"
        else:
            for event in item.events:
                self.metrics.events.labels(_event_type(event)).inc()
                for detector in self._detectors:
                    self._guarded(detector, detector.observe_event, event)
        self.metrics.count_record(item.collector, outcome)
        if item.ticket is not None:
            item.ticket.release()

    def _process_assembled(self, traces: list[EmittedTrace]) -> None:
        for emitted in traces:
            if emitted.failed:
                self.metrics.traces[emitted.outcome].inc()
                self.metrics.detector_errors.labels("assembly").inc()
            elif emitted.trace is None:
                self.metrics.traces["not_rag"].inc()
                self.metrics.coverage.unreadable(emitted.instrumentation)
            else:
                self.metrics.traces[emitted.outcome].inc()
                self._process(emitted.trace)
            for ticket in emitted.tickets:
                ticket.release()

    def _process(self, trace: RagTrace) -> None:
        # Folded once here, so that every detector's variant label stays in service.variants.
        trace = self.metrics.variants.fold(trace)
        self.metrics.requests[trace.source].of(trace).inc()
        if trace.variant is None or trace.variant == PRODUCTION:
            self.metrics.coverage.observe(trace)
        for detector in self._detectors:
            self._guarded(detector, detector.observe, trace)

    def _guarded(self, detector: Detector, method: Callable[[Any], None], arg: object) -> None:
        try:
            method(arg)
        except Exception:
            self.metrics.detector_errors.labels(detector.name).inc()
            if detector.name not in self._failing:  # one log line, not one per trace
                self._failing.add(detector.name)
                log.exception("detector_failed", detector=detector.name)
