"""The collectors' intake contract: what they submit to the pipeline and what it takes back.

A collector decodes and validates on its own thread, then ``submit``s a ``WorkItem`` to
a ``Consumer`` (the pipeline, or a sink in tests): a ``SpanBatch`` of its own span type,
a ``WholeTrace`` that arrived complete, or ``Events``. A ``Ticket`` follows the source
record until every trace it fed has been processed (Kafka commits its offset then). The
collector that reads spans provides the ``TraceAssembly`` that turns them into traces on
the pipeline thread (``monitor/runtime/pipeline.py``), which hands back ``Added`` and
``EmittedTrace`` values.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from monitor.contract.pipeline_metrics import Origin, PipelineMetrics
from monitor.contract.trace import Event, RagTrace, Source

# The pipeline worker's name, also its thread's: an event emitted on that thread must not
# wait for room in the queue it alone empties (``monitor.contract.components.EventHook``).
PIPELINE_THREAD = "pipeline"


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


# Not frozen: one is made per trace, and a frozen dataclass sets each field through
# object.__setattr__ (0.5 us a trace for this one); nothing changes it after it is made.
@dataclass(slots=True)
class EmittedTrace:
    """A trace the assembly let go: its ``RagTrace`` (None when it is no RAG request or
    could not be built) and the tickets of the records that fed it. ``waited``: no span of
    the trace came, only results sent apart that waited for it (``events``)."""

    trace: RagTrace | None
    outcome: Literal["complete", "expired", "evicted", "waited"]
    tickets: list[Ticket]
    failed: bool = False  # the mapping raised; counted as an assembly error
    # The trace's instrumentation scope when it is no RAG request (field coverage counts it).
    instrumentation: str | None = None
    # Results sent apart and held for this trace that it does not carry (it is no request,
    # or it holds as many as its bound allows): handed to the detectors as events.
    events: Sequence[Event] = ()


@dataclass(frozen=True, slots=True)
class Added:
    """What adding one batch of spans, or joining one batch of events, let go and refused."""

    evicted: list[EmittedTrace]  # emitted early to keep the held traces bounded
    late: int = 0  # spans of a trace already emitted
    refused: int = (
        0  # spans over the per-trace bound (collectors.spans.assembly.max_spans_per_trace)
    )
    # Events to hand to the detectors now: a late span's evaluation results (its request
    # already emitted), or the events of an ``Events`` item the assembly did not hold.
    events: Sequence[Event] = ()


class TraceAssembly(Protocol):
    """Turns the spans collectors submit into traces; called on the pipeline thread only."""

    @property
    def pending(self) -> int:
        """Traces held, waiting for more spans."""

    def add(self, spans: Sequence[Any], source: Source, now: float, ticket: Ticket | None) -> Added:
        """Hold ``spans``; returns the traces evicted to stay bounded and the spans dropped."""

    def join(self, events: Sequence[Event], now: float, ticket: Ticket | None) -> Added:
        """Hold the evaluation results among ``events`` that name a trace still being
        assembled, or not seen yet, to be emitted with it; the others come back in
        ``Added.events``, to be handed on now."""

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


class Consumer(Protocol):
    """What collectors write to: the pipeline, or a sink in tests."""

    metrics: PipelineMetrics

    def submit(self, item: WorkItem, timeout: float | None = None) -> bool:
        """Queue ``item``; False when it could not be queued within ``timeout`` seconds."""
