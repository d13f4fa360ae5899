"""The pipeline: a bounded queue from collectors to one thread that assembles and detects.

Collectors decode and validate on their own threads, then ``submit`` work
items. The pipeline thread owns the span assembler and runs the inline
detectors, so neither needs a lock. A full queue makes ``submit`` wait (Kafka)
or time out (OTLP answers "retry later"): intake slows down, nothing is lost.
The pipeline counts the outcome (ok or duplicate) of every item submitted;
collectors count only what they refuse (invalid, dead_lettered).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from collectors.assembly import AssembledTrace, SpanAssembler, Ticket
from collectors.openinference import TraceMapper
from collectors.otlp import Span
from detectors.base import Detector
from monitor.config import AssemblyConfig, MappingConfig
from monitor.metrics import queue_depth
from monitor.trace import Event, Feedback, RagTrace, Source

log = structlog.get_logger("rag_monitor.pipeline")

RecordOutcome = Literal["ok", "invalid", "dead_lettered", "duplicate"]
TraceOutcome = Literal["complete", "expired", "evicted", "not_rag"]
_TICK_S = 0.05


@dataclass(frozen=True, slots=True)
class SpanBatch:
    """Validated spans of one request or record."""

    spans: list[Span]
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
    collector: Source
    ticket: Ticket | None = None


WorkItem = SpanBatch | WholeTrace | Events


class PipelineMetrics:
    """The sidecar's own counters, shared by the collectors and the pipeline."""

    def __init__(self, registry: CollectorRegistry) -> None:
        requests = Counter(
            "rag_requests_total", "RAG requests seen, by source.", ["source"], registry=registry
        )
        # Children bound once: a labels() lookup per trace shows in the ingest profile.
        self.requests = {source: requests.labels(source) for source in get_args(Source)}
        self.records = Counter(
            "rag_monitor_records_total",
            "Records (OTLP requests, Kafka records) by collector and outcome.",
            ["collector", "outcome"],
            registry=registry,
        )
        self.queue_depth = queue_depth(registry)
        traces = Counter(
            "rag_monitor_assembled_traces_total",
            "Traces emitted by span assembly: complete (root + grace), expired (TTL), "
            "evicted (over max_pending_traces); not_rag: no RAG request (index building, "
            "embedding batches, health checks), handed to no detector.",
            ["outcome"],
            registry=registry,
        )
        self.traces = {outcome: traces.labels(outcome) for outcome in get_args(TraceOutcome)}
        self.pending = Gauge(
            "rag_monitor_pending_traces", "Traces held by span assembly.", registry=registry
        )
        self.late_spans = Counter(
            "rag_monitor_late_spans_total",
            "Spans dropped because their trace had already been emitted.",
            registry=registry,
        )
        self.rejected_spans = Counter(
            "rag_monitor_rejected_spans_total",
            "Spans refused by validation.",
            ["collector"],
            registry=registry,
        )
        self.events = Counter(
            "rag_monitor_events_total",
            "Label and feedback events handed to the detectors.",
            ["type"],
            registry=registry,
        )
        self.kafka_lag = Gauge(
            "rag_monitor_kafka_lag_records",
            "Records of the assigned partitions not yet read (high watermark - position).",
            ["topic"],
            registry=registry,
        )
        self.detector_errors = Counter(
            "rag_monitor_detector_errors_total",
            "Exceptions raised by a detector (the trace is still counted).",
            ["detector"],
            registry=registry,
        )

    def count_record(self, collector: Source, outcome: RecordOutcome) -> None:
        self.records.labels(collector, outcome).inc()


class Pipeline:
    """Bounded queue -> span assembly -> inline detectors."""

    def __init__(
        self,
        config: AssemblyConfig,
        detectors: Sequence[Detector],
        metrics: PipelineMetrics,
        *,
        queue_size: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
        mapping: MappingConfig | None = None,
    ) -> None:
        self.metrics = metrics
        self._mapper = TraceMapper(mapping)
        self._detectors = list(detectors)
        self._assembler = SpanAssembler(config.grace_s, config.ttl_s, config.max_pending_traces)
        self._queue: queue.Queue[WorkItem | None] = queue.Queue(maxsize=queue_size)
        self._clock = clock
        self._thread: threading.Thread | None = None
        self._failing: set[str] = set()
        metrics.queue_depth.labels("ingest").set_function(self._queue.qsize)
        metrics.pending.set_function(lambda: self._assembler.pending)

    def start(self) -> None:
        for detector in self._detectors:
            detector.start()
        self._thread = threading.Thread(target=self._run, name="pipeline", daemon=True)
        self._thread.start()

    def submit(self, item: WorkItem, timeout: float | None = None) -> bool:
        """Queue ``item``; False when the queue stayed full for ``timeout`` seconds."""
        try:
            self._queue.put(item, timeout=timeout)
        except queue.Full:
            return False
        return True

    def shutdown(self) -> None:
        """Process what is queued, emit every pending trace, stop. Safe twice."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        for detector in self._detectors:
            detector.shutdown()

    def _run(self) -> None:
        next_tick = self._clock() + _TICK_S
        while True:
            try:
                item = self._queue.get(timeout=_TICK_S)
            except queue.Empty:
                item = False  # type: ignore[assignment]
            if item is None:
                break
            now = self._clock()
            if item:
                self._handle(item, now)
            if now >= next_tick:
                self._process_assembled(self._assembler.due(now))
                next_tick = now + _TICK_S
        drained = self._assembler.drain()
        self._process_assembled(drained)
        log.info("pipeline_drained", pending_traces_emitted=len(drained))

    def _handle(self, item: WorkItem, now: float) -> None:
        outcome: RecordOutcome = "ok"
        if isinstance(item, SpanBatch):
            evicted, late = self._assembler.add(item.spans, item.collector, now, item.ticket)
            if late:
                self.metrics.late_spans.inc(late)
            self._process_assembled(evicted)
        elif isinstance(item, WholeTrace):
            if self._assembler.claim(item.trace.trace_id):
                self._process(item.trace)
            else:
                # The same trace id seen again: a replay after a restart or a retry.
                outcome = "duplicate"
        else:
            for event in item.events:
                self.metrics.events.labels(
                    "feedback" if isinstance(event, Feedback) else "label"
                ).inc()
                for detector in self._detectors:
                    self._guarded(detector, detector.observe_event, event)
        self.metrics.count_record(item.collector, outcome)
        if item.ticket is not None:
            item.ticket.release()

    def _process_assembled(self, traces: list[AssembledTrace]) -> None:
        for assembled in traces:
            try:
                trace = self._mapper.build(assembled.spans, assembled.source)
            except Exception:  # a mapping bug must not stop the sidecar
                self.metrics.traces[assembled.outcome].inc()
                log.exception("trace_build_failed", trace_id=assembled.trace_id)
                self.metrics.detector_errors.labels("assembly").inc()
            else:
                self.metrics.traces["not_rag" if trace is None else assembled.outcome].inc()
                if trace is not None:
                    self._process(trace)
            for ticket in assembled.tickets:
                ticket.release()

    def _process(self, trace: RagTrace) -> None:
        self.metrics.requests[trace.source].inc()
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
