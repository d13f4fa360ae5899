"""Span assembly: group the spans of one trace until the trace is complete.

Spans of one trace arrive in several requests, from several exporters, children
before or after the root. A trace is emitted once: ``grace_s`` after its root
span arrived (``complete``), ``ttl_s`` after its first span without a root
(``expired``), or early when more than ``max_pending_traces`` are held
(``evicted``, the oldest first). Spans arriving for a trace already emitted
are counted as late and dropped, so a straggler cannot make a second request; the
evaluation results a late span carries (an evaluator that ran after the request was
emitted) are handed on as events, joined to the request by trace id like log records;
emitted trace ids are remembered for ``2 * ttl_s`` (and at most 200,000), so that
memory levels off after two TTLs instead of growing with traffic.
Evaluation results sent apart from their spans (log records) that name a pending trace
join it (``join``) and are emitted inside it, so they count under its variant; results
naming a trace not seen yet (a producer's log exporter flushing before its span exporter)
wait for its first span up to ``ttl_s`` (at most ``max_pending_traces`` of them), then are
handed on alone, as are results of a trace already emitted.
A trace holds at most ``max_spans_per_trace`` spans: further ones are refused
and counted, and the trace is emitted as usual with the spans it holds (its
root still completes it when the root is among the refused), so no producer
can make one trace cost the pipeline thread more than that bound.

Single-threaded by design: only the pipeline thread calls it. ``SpanAssembly``
is what the core pipeline is given: the assembler plus the OpenInference
mapping, handing over finished ``RagTrace`` values.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

import structlog

from collectors.spans.config import AssemblyConfig, MappingConfig
from collectors.spans.evaluations import MAX_RESULTS, evaluation_results
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span
from monitor.contract.trace import EvaluationResult, Event, RagTrace, Source
from monitor.contract.work_items import Added, EmittedTrace, Ticket

log = structlog.get_logger("rag_monitor.assembly")

Outcome = Literal["complete", "expired", "evicted"]
Released = Literal["waited"]  # results whose trace had no span here within ttl_s


@dataclass(slots=True)
class _Pending:
    source: Source
    first_seen: float
    spans: dict[str, Span] = field(default_factory=dict)
    root_seen: float | None = None
    tickets: list[Ticket] = field(default_factory=list)
    refused: int = 0  # spans over max_spans_per_trace
    results: list[EvaluationResult] = field(default_factory=list)  # sent apart, joined


@dataclass(slots=True)
class _Waiting:
    """Results naming a trace no span of which has arrived yet."""

    first_seen: float
    results: list[EvaluationResult] = field(default_factory=list)
    tickets: list[Ticket] = field(default_factory=list)


# Not frozen, as EmittedTrace: one is made per trace, and a frozen dataclass sets each
# field through object.__setattr__ (0.5 us a trace for this one); nothing changes it.
@dataclass(slots=True)
class AssembledTrace:
    trace_id: str
    source: Source | None  # None: no span came, only results that waited for them
    spans: list[Span]
    tickets: list[Ticket]
    outcome: Outcome | Released
    results: list[EvaluationResult] = field(default_factory=list)


class SpanAssembler:
    """Holds pending traces; ``add`` spans, then collect ``due`` traces."""

    def __init__(
        self,
        grace_s: float,
        ttl_s: float,
        max_pending: int,
        max_spans: int = 5_000,
        remember_emitted: int = 200_000,
    ) -> None:
        self._remember_s = 2 * ttl_s
        self._grace_s = grace_s
        self._ttl_s = ttl_s
        self._max_pending = max_pending
        self._max_spans = max_spans
        self._pending: OrderedDict[str, _Pending] = OrderedDict()  # oldest first
        self._waiting: OrderedDict[str, _Waiting] = OrderedDict()  # oldest first
        self._root_deadlines: deque[tuple[float, str]] = deque()
        self._emitted: OrderedDict[str, float] = OrderedDict()  # trace id -> emitted at
        self._remember_emitted = remember_emitted
        self._now = 0.0  # the latest clock reading given, for when an emission happens

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(
        self, spans: Iterable[Span], source: Source, now: float, ticket: Ticket | None = None
    ) -> tuple[list[AssembledTrace], list[Span], int]:
        """Add spans; returns the traces evicted to stay under the limit, the late spans
        (of a trace already emitted, dropped) and the count of spans refused over
        ``max_spans`` for their trace."""
        late: list[Span] = []
        refused = 0
        self._now = now
        for span in spans:
            trace_id = span.trace_id
            pending = self._pending.get(trace_id)
            if pending is None:
                if trace_id in self._emitted:
                    late.append(span)
                    continue
                pending = self._pending[trace_id] = _Pending(source, now)
                if self._waiting:  # once per new trace, never per span
                    self._adopt_waiting(trace_id, pending)
            if span.parent_span_id is None and pending.root_seen is None:
                pending.root_seen = now
                self._root_deadlines.append((now + self._grace_s, trace_id))
            if len(pending.spans) >= self._max_spans and span.span_id not in pending.spans:
                pending.refused += 1
                refused += 1
                continue
            if ticket is not None and (not pending.tickets or pending.tickets[-1] is not ticket):
                ticket.hold()
                pending.tickets.append(ticket)
            pending.spans[span.span_id] = span
        evicted = []
        while len(self._pending) > self._max_pending:
            evicted.append(self._emit(next(iter(self._pending)), "evicted"))
        return evicted, late, refused

    def join(
        self, events: Sequence[Event], now: float, ticket: Ticket | None = None
    ) -> tuple[list[Event], list[AssembledTrace]]:
        """Hold each evaluation result naming a pending trace with it, or naming a trace not
        seen yet until its spans come; returns the events to hand on now (other events,
        results of an emitted trace or naming none) and the waiting results released to
        stay under ``max_pending``."""
        handed_on: list[Event] = []
        for event in events:
            trace_id = event.trace_id
            if not isinstance(event, EvaluationResult) or not trace_id or trace_id in self._emitted:
                handed_on.append(event)
                continue
            held = self._pending.get(trace_id) or self._waiting.get(trace_id)
            if held is None:
                held = self._waiting[trace_id] = _Waiting(now)
            if len(held.results) >= MAX_RESULTS:  # RagTrace.evaluations' bound
                handed_on.append(event)
                continue
            held.results.append(event)
            if ticket is not None and (not held.tickets or held.tickets[-1] is not ticket):
                ticket.hold()
                held.tickets.append(ticket)
        released = []
        while len(self._waiting) > self._max_pending:
            released.append(self._release(next(iter(self._waiting))))
        return handed_on, released

    def claim(self, trace_id: str) -> bool:
        """Mark a trace that arrived whole as emitted; False if it was seen before."""
        if trace_id in self._emitted or trace_id in self._pending:
            return False
        self._remember(trace_id)
        return True

    def due(self, now: float) -> list[AssembledTrace]:
        """Traces whose grace period or TTL has run out."""
        self._now = now
        self._forget_emitted_before(now - self._remember_s)
        ready = []
        while self._root_deadlines and self._root_deadlines[0][0] <= now:
            _, trace_id = self._root_deadlines.popleft()
            if trace_id in self._pending:
                ready.append(self._emit(trace_id, "complete"))
        while self._pending:
            trace_id, oldest = next(iter(self._pending.items()))
            if oldest.first_seen + self._ttl_s > now:
                break
            ready.append(self._emit(trace_id, "expired"))
        while self._waiting:
            trace_id, waiting = next(iter(self._waiting.items()))
            if waiting.first_seen + self._ttl_s > now:
                break
            ready.append(self._release(trace_id))
        return ready

    def drain(self) -> list[AssembledTrace]:
        """Emit everything held (at shutdown): traces with a root count as complete."""
        self._root_deadlines.clear()
        return [
            self._emit(trace_id, "complete" if pending.root_seen is not None else "expired")
            for trace_id, pending in list(self._pending.items())
        ] + [self._release(trace_id) for trace_id in list(self._waiting)]

    def _emit(self, trace_id: str, outcome: Outcome) -> AssembledTrace:
        pending = self._pending.pop(trace_id)
        self._remember(trace_id)
        if pending.refused:  # one line per oversized trace, never one per span
            log.warning(
                "trace_spans_refused",
                trace_id=trace_id,
                held=len(pending.spans),
                refused=pending.refused,
                max_spans_per_trace=self._max_spans,
            )
        return AssembledTrace(trace_id, pending.source, list(pending.spans.values()),
                              pending.tickets, outcome, pending.results)  # fmt: skip

    def _adopt_waiting(self, trace_id: str, pending: _Pending) -> None:
        """A new trace takes the results that waited for its first span."""
        waiting = self._waiting.pop(trace_id, None)
        if waiting is not None:
            pending.results, pending.tickets = waiting.results, waiting.tickets

    def _release(self, trace_id: str) -> AssembledTrace:
        """Waiting results whose trace sent no span here: handed on alone."""
        waiting = self._waiting.pop(trace_id)
        return AssembledTrace(trace_id, None, [], waiting.tickets, "waited", waiting.results)

    def _remember(self, trace_id: str) -> None:
        self._emitted[trace_id] = self._now
        if len(self._emitted) > self._remember_emitted:
            self._emitted.popitem(last=False)

    def _forget_emitted_before(self, cutoff: float) -> None:
        while self._emitted and next(iter(self._emitted.values())) < cutoff:
            self._emitted.popitem(last=False)


class SpanAssembly:
    """The core's ``TraceAssembly`` for spans: assemble, then map each trace to a ``RagTrace``."""

    def __init__(self, assembly: AssemblyConfig, mapping: MappingConfig) -> None:
        self._assembler = SpanAssembler(
            assembly.grace_s,
            assembly.ttl_s,
            assembly.max_pending_traces,
            assembly.max_spans_per_trace,
        )
        self._mapper = TraceMapper(mapping)

    @property
    def pending(self) -> int:
        return self._assembler.pending

    def add(
        self, spans: Iterable[Span], source: Source, now: float, ticket: Ticket | None
    ) -> Added:
        evicted, late, refused = self._assembler.add(spans, source, now, ticket)
        return Added(self._mapped(evicted), len(late), refused, self._late_results(late))

    def join(self, events: Sequence[Event], now: float, ticket: Ticket | None) -> Added:
        handed_on, released = self._assembler.join(events, now, ticket)
        return Added(self._mapped(released), events=handed_on)

    def claim(self, trace_id: str) -> bool:
        return self._assembler.claim(trace_id)

    def due(self, now: float) -> list[EmittedTrace]:
        return self._mapped(self._assembler.due(now))

    def drain(self) -> list[EmittedTrace]:
        return self._mapped(self._assembler.drain())

    @staticmethod
    def _late_results(late: list[Span]) -> tuple[EvaluationResult, ...]:
        """The evaluation results late spans carry: events, their request long emitted."""
        if not late:
            return ()
        try:
            return evaluation_results(late)
        except Exception:  # a reading bug must not stop the sidecar; the spans count as late
            log.exception("late_evaluations_failed", spans=len(late))
            return ()

    def _mapped(self, traces: list[AssembledTrace]) -> list[EmittedTrace]:
        emitted = []
        for assembled in traces:
            if assembled.source is None:  # no span came: only results that waited
                emitted.append(EmittedTrace(None, "waited", assembled.tickets,
                                            events=tuple(assembled.results)))  # fmt: skip
                continue
            try:
                trace = self._mapper.build(assembled.spans, assembled.source)
            except Exception:  # a mapping bug must not stop the sidecar
                log.exception("trace_build_failed", trace_id=assembled.trace_id)
                emitted.append(EmittedTrace(None, assembled.outcome, assembled.tickets, True,
                                            events=tuple(assembled.results)))  # fmt: skip
                continue
            # A trace that is no request keeps who wrote it, for field coverage.
            scope = None if trace else _first_scope(assembled.spans)
            trace, rest = _with_results(trace, assembled.results)
            emitted.append(
                EmittedTrace(trace, assembled.outcome, assembled.tickets, False, scope, rest)
            )
        return emitted


def _with_results(
    trace: RagTrace | None, results: list[EvaluationResult]
) -> tuple[RagTrace | None, tuple[EvaluationResult, ...]]:
    """``trace`` with the results joined to it (as many as its bound leaves room for), and
    those left over: handed on as events, as all are when the trace is no request."""
    if not results or trace is None:
        return trace, tuple(results)
    room = MAX_RESULTS - len(trace.evaluations)
    joined = replace(trace, evaluations=(*trace.evaluations, *results[:room]))
    return joined, tuple(results[room:])


def _first_scope(spans: Iterable[Span]) -> str | None:
    """The first instrumentation scope name the spans carry."""
    return next((span.scope for span in spans if span.scope), None)
