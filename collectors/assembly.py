"""Span assembly: group the spans of one trace until the trace is complete.

Spans of one trace arrive in several requests, from several exporters, children
before or after the root. A trace is emitted once: ``grace_s`` after its root
span arrived (``complete``), ``ttl_s`` after its first span without a root
(``expired``), or early when more than ``max_pending_traces`` are held
(``evicted``, the oldest first). Spans arriving for a trace already emitted
are counted as late and dropped, so a straggler cannot make a second request.

Single-threaded by design: only the pipeline thread calls it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from collectors.otlp import Span
from monitor.trace import Source

Outcome = Literal["complete", "expired", "evicted"]


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


@dataclass(slots=True)
class _Pending:
    source: Source
    first_seen: float
    spans: dict[str, Span] = field(default_factory=dict)
    root_seen: float | None = None
    tickets: list[Ticket] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class AssembledTrace:
    trace_id: str
    source: Source
    spans: list[Span]
    tickets: list[Ticket]
    outcome: Outcome


class SpanAssembler:
    """Holds pending traces; ``add`` spans, then collect ``due`` traces."""

    def __init__(
        self, grace_s: float, ttl_s: float, max_pending: int, remember_emitted: int = 200_000
    ) -> None:
        self._grace_s = grace_s
        self._ttl_s = ttl_s
        self._max_pending = max_pending
        self._pending: OrderedDict[str, _Pending] = OrderedDict()  # oldest first
        self._root_deadlines: deque[tuple[float, str]] = deque()
        self._emitted: OrderedDict[str, None] = OrderedDict()
        self._remember_emitted = remember_emitted

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(
        self, spans: Iterable[Span], source: Source, now: float, ticket: Ticket | None = None
    ) -> tuple[list[AssembledTrace], int]:
        """Add spans; returns traces evicted to stay under the limit and the late-span count."""
        late = 0
        for span in spans:
            trace_id = span.trace_id
            pending = self._pending.get(trace_id)
            if pending is None:
                if trace_id in self._emitted:
                    late += 1
                    continue
                pending = self._pending[trace_id] = _Pending(source, now)
            if ticket is not None and (not pending.tickets or pending.tickets[-1] is not ticket):
                ticket.hold()
                pending.tickets.append(ticket)
            pending.spans[span.span_id] = span
            if span.parent_span_id is None and pending.root_seen is None:
                pending.root_seen = now
                self._root_deadlines.append((now + self._grace_s, trace_id))
        evicted = []
        while len(self._pending) > self._max_pending:
            evicted.append(self._emit(next(iter(self._pending)), "evicted"))
        return evicted, late

    def claim(self, trace_id: str) -> bool:
        """Mark a trace that arrived whole as emitted; False if it was seen before."""
        if trace_id in self._emitted or trace_id in self._pending:
            return False
        self._remember(trace_id)
        return True

    def due(self, now: float) -> list[AssembledTrace]:
        """Traces whose grace period or TTL has run out."""
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
        return ready

    def drain(self) -> list[AssembledTrace]:
        """Emit everything held (at shutdown): traces with a root count as complete."""
        self._root_deadlines.clear()
        return [
            self._emit(trace_id, "complete" if pending.root_seen is not None else "expired")
            for trace_id, pending in list(self._pending.items())
        ]

    def _emit(self, trace_id: str, outcome: Outcome) -> AssembledTrace:
        pending = self._pending.pop(trace_id)
        self._remember(trace_id)
        return AssembledTrace(
            trace_id, pending.source, list(pending.spans.values()), pending.tickets, outcome
        )

    def _remember(self, trace_id: str) -> None:
        self._emitted[trace_id] = None
        if len(self._emitted) > self._remember_emitted:
            self._emitted.popitem(last=False)
