"""The core pipeline with a stand-in assembly: order, outcomes, tickets and drain."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar

from monitor.contract.detector import InlineDetector
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Event, Feedback, RagTrace, Source
from monitor.contract.work_items import Added, EmittedTrace, Events, SpanBatch, Ticket, WholeTrace
from monitor.runtime.pipeline import Pipeline
from tests.conftest import sample

T0 = datetime(2026, 12, 3, tzinfo=UTC)


def rag_trace(trace_id: str, source: Source = "otlp") -> RagTrace:
    return RagTrace(trace_id=trace_id, time=T0, source=source)


class HeldAssembly:
    """Holds each batch (its 'spans' are trace ids, None: not a RAG request) until drained."""

    def __init__(self) -> None:
        self.held: list[EmittedTrace] = []
        self.claimed: set[str] = set()

    @property
    def pending(self) -> int:
        return len(self.held)

    def add(self, spans: Sequence[Any], source: Source, now: float, ticket: Ticket | None) -> Added:
        for trace_id in spans:
            if ticket is not None:
                ticket.hold()
            trace = None if trace_id is None else rag_trace(trace_id, source)
            self.held.append(EmittedTrace(trace, "complete", [ticket] if ticket else []))
        return Added([])

    def join(self, events: Sequence[Event], now: float, ticket: Ticket | None) -> Added:
        return Added([], events=events)

    def claim(self, trace_id: str) -> bool:
        new = trace_id not in self.claimed
        self.claimed.add(trace_id)
        return new

    def due(self, now: float) -> list[EmittedTrace]:
        return []

    def drain(self) -> list[EmittedTrace]:
        drained, self.held = self.held, []
        return drained


class Recorder(InlineDetector):
    name: ClassVar[str] = "recorder"

    def __init__(self) -> None:
        self.seen: list[str] = []

    def observe(self, trace: RagTrace) -> None:
        self.seen.append(trace.trace_id)

    def observe_event(self, event: Event) -> None:
        self.seen.append(f"event:{event.trace_id}")


def started(assembly: HeldAssembly) -> tuple[Pipeline, Recorder, SidecarRegistry]:
    registry = SidecarRegistry()
    recorder = Recorder()
    pipeline = Pipeline(assembly, [recorder], PipelineMetrics(registry))
    pipeline.start()
    return pipeline, recorder, registry


def test_items_reach_the_detectors_in_submission_order() -> None:
    """Whole traces and events are observed in the order they were submitted."""
    pipeline, recorder, _ = started(HeldAssembly())
    pipeline.submit(WholeTrace(rag_trace("a")))
    pipeline.submit(Events([Feedback(trace_id="a", kind="copy")], "otlp"))
    pipeline.submit(WholeTrace(rag_trace("b", "kafka")))
    pipeline.shutdown()
    assert recorder.seen == ["a", "event:a", "b"]


def test_shutdown_drains_held_traces_and_counts_each_outcome() -> None:
    """Traces still held at shutdown are emitted; not-RAG ones are counted, not observed."""
    assembly = HeldAssembly()
    pipeline, recorder, registry = started(assembly)
    pipeline.submit(SpanBatch(["t1", None, "t2"], "otlp"))
    pipeline.shutdown()
    assert recorder.seen == ["t1", "t2"]
    assert sample(registry, "rag_monitor_assembled_traces_total", outcome="complete") == 2
    assert sample(registry, "rag_monitor_assembled_traces_total", outcome="not_rag") == 1
    assert sample(registry, "rag_requests_total", source="otlp") == 2
    assert sample(registry, "rag_monitor_records_total", collector="otlp", outcome="ok") == 1


def test_a_ticket_is_done_only_when_every_trace_it_fed_was_processed() -> None:
    """A record's ticket completes after its held traces are observed, not at submission."""
    assembly = HeldAssembly()
    pipeline, recorder, _ = started(assembly)
    ticket = Ticket(lambda: recorder.seen.append("record done"))
    pipeline.submit(SpanBatch(["t1", "t2"], "kafka", ticket))
    pipeline.submit(WholeTrace(rag_trace("x")))  # handled while t1 and t2 are still held
    pipeline.shutdown()  # the drain emits t1 and t2
    assert recorder.seen == ["x", "t1", "t2", "record done"]


def test_a_replayed_whole_trace_counts_as_duplicate() -> None:
    """The same trace id arriving whole twice is observed once and counted duplicate."""
    pipeline, recorder, registry = started(HeldAssembly())
    pipeline.submit(WholeTrace(rag_trace("a", "kafka")))
    pipeline.submit(WholeTrace(rag_trace("a", "kafka")))
    pipeline.shutdown()
    assert recorder.seen == ["a"]
    assert (
        sample(registry, "rag_monitor_records_total", collector="kafka", outcome="duplicate") == 1
    )


def test_shutdown_is_safe_twice_and_before_start() -> None:
    """shutdown before start and a second shutdown do nothing."""
    registry = SidecarRegistry()
    pipeline = Pipeline(HeldAssembly(), [], PipelineMetrics(registry))
    pipeline.shutdown()
    pipeline.start()
    pipeline.shutdown()
    pipeline.shutdown()
