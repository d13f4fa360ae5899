"""The pipeline: a bounded queue from collectors to one thread that assembles and detects.

Collectors decode and validate on their own threads, then ``submit`` work
items (``monitor/contract/work_items.py``: what they submit, the ``Consumer`` they submit to, and
the ``TraceAssembly`` they provide). The pipeline thread owns the trace assembly
(spans are the collectors' business) and runs the inline detectors, so neither
needs a lock. The events of an ``Events`` item pass through the assembly first
(``join``): an evaluation result sent apart from its spans is held with its trace and
reaches the detectors inside it. A full queue makes ``submit`` wait (Kafka)
or time out (OTLP answers "retry later"): intake slows down, nothing is lost.
The pipeline counts the outcome (ok or duplicate) of every item submitted;
collectors count only what they refuse (invalid, dead_lettered): the counters are
``monitor/contract/pipeline_metrics.py``'s.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import structlog

from monitor.contract.detector import Detector
from monitor.contract.pipeline_metrics import PipelineMetrics, RecordOutcome
from monitor.contract.trace import (
    EvaluationResult,
    Event,
    ExclusionOutcome,
    Feedback,
    JudgeScore,
    RagTrace,
    UnscoredAnswer,
)
from monitor.contract.variants import PRODUCTION
from monitor.contract.work_items import (
    PIPELINE_THREAD,
    EmittedTrace,
    SpanBatch,
    TraceAssembly,
    WholeTrace,
    WorkItem,
)
from monitor.contract.worker import Worker

log = structlog.get_logger("rag_monitor.pipeline")

_TICK_S = 0.05
# What is still queued at shutdown is processed for this long, then counted in
# rag_monitor_worker_dropped_total. The stop budget inside Kubernetes' 30 s grace
# period: receivers 5 s, this 12 s, then the detectors' workers in parallel (10 s
# at most: the Phoenix annotator; drift 5 s).
DRAIN_S = 12.0


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
            supervisor=metrics.registry.supervisor,
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
        if isinstance(item, WholeTrace):
            if self._assembler.claim(item.trace.trace_id):
                self._process(item.trace)
            else:
                # The same trace id seen again: a replay after a restart or a retry.
                outcome = "duplicate"
        else:
            if isinstance(item, SpanBatch):
                added = self._assembler.add(item.spans, item.collector, now, item.ticket)
                if added.late:
                    self.metrics.late_spans.inc(added.late)
                if added.refused:
                    self.metrics.refused_spans[item.collector].inc(added.refused)
            else:  # results sent apart join their trace while it is assembled
                added = self._assembler.join(item.events, now, item.ticket)
            self._observe_events(added.events)
            self._process_assembled(added.evicted)
        self.metrics.count_record(item.collector, outcome)
        if item.ticket is not None:
            item.ticket.release()

    def _observe_events(self, events: Sequence[Event]) -> None:
        for event in events:
            self.metrics.events.labels(_event_type(event)).inc()
            for detector in self._detectors:
                try:
                    detector.observe_event(event)
                except Exception:
                    self._failed(detector)

    def _process_assembled(self, traces: list[EmittedTrace]) -> None:
        for emitted in traces:
            if emitted.outcome == "waited":
                pass  # no trace: only its results, handed on below
            elif emitted.failed:
                self.metrics.traces[emitted.outcome].inc()
                self.metrics.detector_errors.labels("assembly").inc()
            elif emitted.trace is None:
                self.metrics.traces["not_rag"].inc()
                self.metrics.coverage.unreadable(emitted.instrumentation)
            else:
                self.metrics.traces[emitted.outcome].inc()
                self._process(emitted.trace)
            self._observe_events(emitted.events)
            for ticket in emitted.tickets:
                ticket.release()

    def _process(self, trace: RagTrace) -> None:
        # Folded once here, so that every detector's variant label stays in service.variants.
        trace = self.metrics.variants.fold(trace)
        self.metrics.requests[trace.source].of(trace).inc()
        if trace.variant is None or trace.variant == PRODUCTION:
            self.metrics.coverage.observe(trace)
        # The try is inline, not in a helper: a call more per detector and trace shows in
        # the ingest profile (tests/perf/bench_ab.py).
        for detector in self._detectors:
            try:
                detector.observe(trace)
            except Exception:
                self._failed(detector)

    def _failed(self, detector: Detector) -> None:
        """Count the exception being handled; log it on the detector's first failure."""
        self.metrics.detector_errors.labels(detector.name).inc()
        if detector.name not in self._failing:  # one log line, not one per trace
            self._failing.add(detector.name)
            log.exception("detector_failed", detector=detector.name)


def _event_type(event: Event) -> str:
    if isinstance(event, Feedback):
        return "feedback"
    if isinstance(event, ExclusionOutcome):
        return "exclusion_outcome"
    if isinstance(event, EvaluationResult):
        return "evaluation_result"
    if isinstance(event, UnscoredAnswer):
        return "unscored_answer"
    return "judge_score" if isinstance(event, JudgeScore) else "label"
