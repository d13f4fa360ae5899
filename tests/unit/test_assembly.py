"""Span assembly: each trace emitted once, on grace, TTL or overflow; tickets released."""

from __future__ import annotations

from collectors.assembly import SpanAssembler
from collectors.otlp import Span
from monitor.pipeline import Ticket


def span(trace: str, span_id: str, parent: str | None = None) -> Span:
    return Span(trace.ljust(32, "0"), span_id.ljust(16, "0"), parent and parent.ljust(16, "0"),
                "s", 1, 2, {})  # fmt: skip


def test_trace_completes_grace_after_its_root() -> None:
    """Children before and after the root, across adds, make one trace at root time + grace."""
    assembler = SpanAssembler(grace_s=2.0, ttl_s=60.0, max_pending=10)
    assembler.add([span("t1", "c1", "r")], "otlp", now=0.0)
    assembler.add([span("t1", "r")], "otlp", now=1.0)
    assembler.add([span("t1", "c2", "r")], "kafka", now=2.5)
    assert assembler.due(2.9) == []
    [trace] = assembler.due(3.0)
    assert trace.outcome == "complete"
    assert trace.source == "otlp"
    assert sorted(s.span_id[:2] for s in trace.spans) == ["c1", "c2", "r0"]
    assert assembler.pending == 0


def test_trace_without_root_expires_at_ttl() -> None:
    """A rootless trace is emitted as expired once ttl_s has passed since its first span."""
    assembler = SpanAssembler(grace_s=1.0, ttl_s=10.0, max_pending=10)
    assembler.add([span("t1", "c1", "r")], "otlp", now=0.0)
    assert assembler.due(9.9) == []
    [trace] = assembler.due(10.0)
    assert trace.outcome == "expired"


def test_oldest_trace_is_evicted_beyond_the_limit() -> None:
    """Over max_pending the oldest pending trace is emitted early, as evicted."""
    assembler = SpanAssembler(grace_s=1.0, ttl_s=10.0, max_pending=2)
    assembler.add([span("t1", "a")], "otlp", now=0.0)
    assembler.add([span("t2", "a")], "otlp", now=0.1)
    evicted, _ = assembler.add([span("t3", "a")], "otlp", now=0.2)
    assert [(t.trace_id[:2], t.outcome) for t in evicted] == [("t1", "evicted")]
    assert assembler.pending == 2


def test_late_spans_of_an_emitted_trace_are_dropped() -> None:
    """A straggler after emission is counted as late and never makes a second trace."""
    assembler = SpanAssembler(grace_s=0.5, ttl_s=10.0, max_pending=10)
    assembler.add([span("t1", "r")], "otlp", now=0.0)
    assert len(assembler.due(0.5)) == 1
    _, late = assembler.add([span("t1", "c9", "r")], "otlp", now=0.6)
    assert late == 1
    assert assembler.pending == 0
    assert assembler.due(100.0) == []


def test_duplicate_spans_are_kept_once() -> None:
    """The same span delivered twice (an exporter retry) appears once in the trace."""
    assembler = SpanAssembler(grace_s=0.0, ttl_s=10.0, max_pending=10)
    assembler.add([span("t1", "r"), span("t1", "r")], "otlp", now=0.0)
    [trace] = assembler.due(0.0)
    assert len(trace.spans) == 1


def test_claim_refuses_a_trace_seen_before() -> None:
    """A whole trace is claimed once; its id pending or emitted makes it a duplicate."""
    assembler = SpanAssembler(grace_s=1.0, ttl_s=10.0, max_pending=10)
    assert assembler.claim("x1")
    assert not assembler.claim("x1")
    assembler.add([span("t1", "r")], "otlp", now=0.0)
    assert not assembler.claim("t1".ljust(32, "0"))


def test_drain_emits_everything_pending() -> None:
    """At shutdown every pending trace is emitted: complete with a root, expired without."""
    assembler = SpanAssembler(grace_s=5.0, ttl_s=60.0, max_pending=10)
    assembler.add([span("t1", "r"), span("t2", "c", "r")], "otlp", now=0.0)
    outcomes = sorted(t.outcome for t in assembler.drain())
    assert outcomes == ["complete", "expired"]


def test_ticket_is_done_when_every_trace_it_fed_is_released() -> None:
    """A record feeding two traces is done only after both are processed and its hold released."""
    done: list[bool] = []
    ticket = Ticket(lambda: done.append(True))
    assembler = SpanAssembler(grace_s=0.0, ttl_s=60.0, max_pending=10)
    assembler.add([span("t1", "r"), span("t1", "c", "r"), span("t2", "r")], "kafka", 0.0, ticket)
    ticket.release()  # the submission's own hold
    traces = assembler.due(0.0)
    assert [len(t.tickets) for t in traces] == [1, 1]
    traces[0].tickets[0].release()
    assert done == []
    traces[1].tickets[0].release()
    assert done == [True]
