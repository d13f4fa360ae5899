"""Span assembly: each trace emitted once, on grace, TTL or overflow; tickets released."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import ClassVar

import pytest

from collectors.spans.assembly import SpanAssembler, SpanAssembly
from collectors.spans.config import AssemblyConfig, MappingConfig
from collectors.spans.evaluations import EVALUATION_EVENT, MAX_RESULTS
from collectors.spans.span import Span, SpanEvent
from detectors.evaluations.config import EvaluationRule, EvaluationsConfig
from detectors.evaluations.detector import EvaluationsDetector
from detectors.evaluations.names import DUPLICATES_TOTAL, RESULTS_TOTAL, UNMATCHED_TOTAL
from detectors.review.config import ReviewConfig
from detectors.review.metrics import ReviewMetrics
from detectors.review.sampler import Action, Enqueue, PassRules, ReviewSampler
from monitor.contract.detector import InlineDetector
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import EvaluationResult, Event, Feedback, RagTrace
from monitor.contract.work_items import Events, SpanBatch, Ticket
from monitor.runtime.pipeline import Pipeline
from tests.conftest import sample, wait_until
from tests.unit.collectors.spans.test_openinference import rag_spans
from tests.unit.collectors.spans.test_openinference import span as rag_span


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
    evicted, _, _ = assembler.add([span("t3", "a")], "otlp", now=0.2)
    assert [(t.trace_id[:2], t.outcome) for t in evicted] == [("t1", "evicted")]
    assert assembler.pending == 2


def test_late_spans_of_an_emitted_trace_are_dropped() -> None:
    """A straggler after emission is counted as late and never makes a second trace."""
    assembler = SpanAssembler(grace_s=0.5, ttl_s=10.0, max_pending=10)
    assembler.add([span("t1", "r")], "otlp", now=0.0)
    assert len(assembler.due(0.5)) == 1
    _, late, _ = assembler.add([span("t1", "c9", "r")], "otlp", now=0.6)
    assert [s.span_id[:2] for s in late] == ["c9"]
    assert assembler.pending == 0
    assert assembler.due(100.0) == []


def test_emitted_trace_ids_are_forgotten_after_two_ttls() -> None:
    """The memory of emitted traces levels off: after 2 * ttl_s an id is forgotten, so a
    straggler that late starts a new pending trace instead of counting as late."""
    assembler = SpanAssembler(grace_s=0.0, ttl_s=10.0, max_pending=10)
    assembler.add([span("t1", "r")], "otlp", now=0.0)
    assert len(assembler.due(0.0)) == 1
    assembler.due(19.0)
    _, late, _ = assembler.add([span("t1", "c1", "r")], "otlp", now=19.0)
    assert len(late) == 1
    assembler.due(21.0)
    _, late, _ = assembler.add([span("t1", "c2", "r")], "otlp", now=21.0)
    assert late == []
    assert assembler.pending == 1


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


# --- bounded work per trace ---------------------------------------------------------------


def chain(trace: str, length: int) -> list[Span]:
    """``length`` spans, each the parent of the next; the root first."""
    ids = [f"{i + 1:016x}" for i in range(length)]
    return [
        Span(
            trace.ljust(32, "0"),
            span_id,
            ids[i - 1] if i else None,
            "s",
            10**9 + i,
            2 * 10**9 - i,
            {"openinference.span.kind": "CHAIN"},
        )
        for i, span_id in enumerate(ids)
    ]


def test_spans_over_the_per_trace_bound_are_refused_and_counted() -> None:
    """Beyond max_spans a trace's new spans are refused; it is emitted with those it holds."""
    assembler = SpanAssembler(grace_s=1.0, ttl_s=10.0, max_pending=10, max_spans=3)
    _, _, refused = assembler.add(
        [span("t1", "r"), span("t1", "a", "r"), span("t1", "b", "r")], "otlp", now=0.0
    )
    assert refused == 0
    _, _, refused = assembler.add(
        [span("t1", "c", "r"), span("t1", "a", "r"), span("t2", "r"), span("t1", "d", "r")],
        "otlp",
        now=0.5,
    )
    assert refused == 2  # c and d; a is held already, t2 has its own bound
    traces = {t.trace_id[:2]: t for t in assembler.due(1.5)}
    assert sorted(s.span_id[:1] for s in traces["t1"].spans) == ["a", "b", "r"]
    assert traces["t1"].outcome == "complete"
    assert len(traces["t2"].spans) == 1


def test_a_refused_root_still_completes_its_trace() -> None:
    """A root arriving after the bound is full completes the trace grace_s later."""
    assembler = SpanAssembler(grace_s=1.0, ttl_s=60.0, max_pending=10, max_spans=2)
    assembler.add([span("t1", "a", "r"), span("t1", "b", "r")], "otlp", now=0.0)
    _, _, refused = assembler.add([span("t1", "r")], "otlp", now=0.5)
    assert refused == 1
    [trace] = assembler.due(1.5)
    assert trace.outcome == "complete"
    assert sorted(s.span_id[:1] for s in trace.spans) == ["a", "b"]


def test_refused_spans_hold_no_ticket() -> None:
    """A record whose spans were all refused is done once submitted: no hold waits for them."""
    done: list[bool] = []
    assembler = SpanAssembler(grace_s=5.0, ttl_s=60.0, max_pending=10, max_spans=1)
    assembler.add([span("t1", "r")], "kafka", now=0.0)
    ticket = Ticket(lambda: done.append(True))
    _, _, refused = assembler.add([span("t1", "c", "r")], "kafka", 0.1, ticket)
    ticket.release()  # the submission's own hold
    assert refused == 1
    assert done == [True]


def test_pipeline_counts_refused_spans_by_collector_and_reason() -> None:
    """The pipeline counts spans over assembly.max_spans_per_trace per collector."""
    registry = SidecarRegistry()
    assembly = SpanAssembly(AssemblyConfig(grace_s=0.0, max_spans_per_trace=10), MappingConfig())
    pipeline = Pipeline(assembly, [], PipelineMetrics(registry))
    pipeline.start()
    pipeline.submit(SpanBatch(chain("t1", 25), "kafka"))
    pipeline.shutdown()
    refused = {"collector": "kafka", "reason": "max_spans_per_trace"}
    assert sample(registry, "rag_monitor_refused_spans_total", **refused) == 15
    assert sample(registry, "rag_monitor_assembled_traces_total", outcome="not_rag") == 1


def test_a_late_spans_evaluation_counts_under_its_emitted_request() -> None:
    """An evaluator span arriving after its request was emitted: its gen_ai.evaluation.result
    reaches the evaluations detector as an event, under the request's variant (joined by trace
    id); the span itself still counts as late, and a late span without results only so."""
    registry = SidecarRegistry()
    assembly = SpanAssembly(AssemblyConfig(grace_s=0.0), MappingConfig())
    rules = {"answer_relevancy": EvaluationRule(score_min=0.7)}
    detector = EvaluationsDetector(EvaluationsConfig(evaluations=rules), registry)
    pipeline = Pipeline(assembly, [detector], PipelineMetrics(registry))
    request = rag_spans()
    request[0] = replace(request[0], attributes={**request[0].attributes, "rag.variant": "canary"})
    pipeline.start()
    pipeline.submit(SpanBatch(request, "otlp"))
    wait_until(lambda: sample(registry, "rag_requests_total") == 1)
    verdict = {"gen_ai.evaluation.name": "answer_relevancy", "gen_ai.evaluation.score.value": 0.4}
    judge = replace(rag_span("e9", "a1", "EVALUATOR", 2200, 2300),
                    events=(SpanEvent(EVALUATION_EVENT, 0, verdict),))  # fmt: skip
    pipeline.submit(SpanBatch([judge, rag_span("c9", "a1", "CHAIN", 2200, 2300)], "otlp"))
    pipeline.shutdown()
    results = {"evaluation": "answer_relevancy", "outcome": "fail", "variant": "canary"}
    assert sample(registry, RESULTS_TOTAL, **results) == 1
    assert sample(registry, UNMATCHED_TOTAL) == 0
    assert sample(registry, "rag_monitor_late_spans_total") == 2
    assert sample(registry, "rag_monitor_events_total", type="evaluation_result") == 1
    assert sample(registry, "rag_monitor_assembled_traces_total") == 1  # no second request


@pytest.mark.parametrize(
    ("max_spans", "refused", "bound_s"),
    [(5_000, 45_000, 1.0), (50_000, 0, 5.0)],
    ids=["default-bound", "whole"],
)
def test_a_50k_span_chain_is_assembled_and_mapped_in_bounded_time(
    max_spans: int, refused: int, bound_s: float
) -> None:
    """A 50,000-span chain in one batch: under a second with the default bound, and linear
    (no RecursionError, seconds not minutes) even when held whole."""
    assembly = SpanAssembly(
        AssemblyConfig(grace_s=0.0, max_spans_per_trace=max_spans), MappingConfig()
    )
    spans = chain("t1", 50_000)
    spans[0].attributes["input.value"] = "a question"
    for nested in spans[1::2]:  # LLM calls nested in each other through CHAIN spans
        nested.attributes["openinference.span.kind"] = "LLM"
        nested.attributes["llm.token_count.prompt"] = 1
    started = time.perf_counter()
    added = assembly.add(spans, "otlp", now=0.0, ticket=None)
    [emitted] = assembly.due(now=0.0)
    elapsed = time.perf_counter() - started
    assert added.refused == refused
    assert emitted.trace is not None
    assert emitted.trace.root_span_id == spans[0].span_id
    assert [u.prompt_tokens for u in emitted.trace.usage] == [1]  # nested calls counted once
    assert elapsed < bound_s, f"{elapsed:.2f}s"


# --- evaluation results sent apart (log records) ------------------------------------------


def sent_apart(trace: str, name: str = "answer_relevancy", score: float = 0.9) -> EvaluationResult:
    """A log record's result naming ``trace`` (as ``span`` pads it)."""
    return EvaluationResult(name, score=score, trace_id=trace.ljust(32, "0"))


def test_a_result_naming_a_pending_trace_is_emitted_inside_it() -> None:
    """A result joins the trace still held, and its record's ticket is done only once the
    trace is released; other events are handed on at once."""
    done: list[bool] = []
    ticket = Ticket(lambda: done.append(True))
    assembler = SpanAssembler(grace_s=1.0, ttl_s=60.0, max_pending=10)
    assembler.add([span("t1", "r")], "otlp", now=0.0)
    thumbs = Feedback(trace_id="t1".ljust(32, "0"), kind="thumbs_up")
    handed_on, released = assembler.join([sent_apart("t1"), thumbs], 0.5, ticket)
    assert (handed_on, released) == ([thumbs], [])
    ticket.release()  # the submission's own hold
    [trace] = assembler.due(1.0)
    assert trace.results == [sent_apart("t1")]
    assert done == []
    trace.tickets[0].release()
    assert done == [True]


def test_a_result_before_its_first_span_waits_for_the_trace() -> None:
    """A result naming a trace not seen yet is held; the trace's first span takes it, and it
    is emitted inside that trace."""
    assembler = SpanAssembler(grace_s=1.0, ttl_s=60.0, max_pending=10)
    assert assembler.join([sent_apart("t1")], 0.0) == ([], [])
    assembler.add([span("t1", "r")], "otlp", now=5.0)
    [trace] = assembler.due(6.0)
    assert (trace.outcome, trace.results) == ("complete", [sent_apart("t1")])


def test_results_of_an_emitted_trace_or_of_none_are_handed_on_at_once() -> None:
    """Results naming a trace already emitted, or naming no trace, are not held."""
    assembler = SpanAssembler(grace_s=0.0, ttl_s=60.0, max_pending=10)
    assembler.add([span("t1", "r")], "otlp", now=0.0)
    assembler.due(0.0)
    by_response = EvaluationResult("answer_relevancy", score=0.9, response_id="resp-1")
    handed_on, _ = assembler.join([sent_apart("t1"), by_response], 1.0)
    assert handed_on == [sent_apart("t1"), by_response]


def test_results_whose_trace_sends_no_span_are_released_at_ttl_and_bounded() -> None:
    """Waiting results are handed on alone ('waited') ttl_s after they came, at shutdown,
    or, the oldest first, when more than max_pending traces' results wait."""
    assembler = SpanAssembler(grace_s=1.0, ttl_s=10.0, max_pending=2)
    assembler.join([sent_apart("t1")], 0.0)
    assembler.join([sent_apart("t2")], 1.0)
    _, released = assembler.join([sent_apart("t3"), sent_apart("t3", "toxicity")], 2.0)
    assert [(r.trace_id[:2], r.outcome, r.spans) for r in released] == [("t1", "waited", [])]
    assert assembler.due(10.9) == []
    [waited] = assembler.due(11.0)
    assert (waited.trace_id[:2], waited.source, waited.results) == ("t2", None, [sent_apart("t2")])
    [drained] = assembler.drain()
    assert drained.results == [sent_apart("t3"), sent_apart("t3", "toxicity")]
    assert assembler.pending == 0


class Reviewing(InlineDetector):
    """The review sampler as a detector of the pipeline, keeping what it takes."""

    name: ClassVar[str] = "review"

    def __init__(self, rules: PassRules, registry: SidecarRegistry) -> None:
        self.taken: list[Action] = []
        config = ReviewConfig.model_validate({"enabled": True, "random_rate": 1.0})
        self._sampler = ReviewSampler(config, ReviewMetrics(registry), self._take, rules=rules)

    def _take(self, action: Action) -> bool:
        self.taken.append(action)
        return True

    def observe(self, trace: RagTrace) -> None:
        self._sampler.observe(trace)

    def observe_event(self, event: Event) -> None:
        self._sampler.observe_event(event)


def test_joined_results_count_under_the_traces_variant_and_reach_review() -> None:
    """Through the pipeline: a canary request's result sent as a log record while its spans
    are assembled counts under canary, not unmatched; the same verdict again (a retried
    export) counts once; the review item carries its outcome."""
    registry = SidecarRegistry()
    assembly = SpanAssembly(AssemblyConfig(grace_s=60.0), MappingConfig())
    rules = {"answer_relevancy": EvaluationRule(score_min=0.7, compare_with_review=True)}
    detector = EvaluationsDetector(EvaluationsConfig(evaluations=rules), registry)
    reviewing = Reviewing({"answer_relevancy": rules["answer_relevancy"].passes}, registry)
    pipeline = Pipeline(assembly, [detector, reviewing], PipelineMetrics(registry))
    request = rag_spans()
    request[0] = replace(request[0], attributes={**request[0].attributes, "rag.variant": "canary"})
    verdict = EvaluationResult("answer_relevancy", score=0.4, trace_id=request[0].trace_id,
                               span_id=request[-1].span_id)  # fmt: skip
    pipeline.start()
    pipeline.submit(SpanBatch(request, "otlp"))
    pipeline.submit(Events([verdict], "otlp"))
    pipeline.submit(Events([verdict], "otlp"))  # the exporter's retry of the same export
    pipeline.shutdown()  # the drain emits the request
    results = {"evaluation": "answer_relevancy", "outcome": "fail", "variant": "canary"}
    assert sample(registry, RESULTS_TOTAL, **results) == 1
    assert sample(registry, DUPLICATES_TOTAL) == 1
    assert sample(registry, UNMATCHED_TOTAL) == 0
    assert sample(registry, "rag_monitor_events_total", type="evaluation_result") == 0
    [enqueued] = reviewing.taken
    assert isinstance(enqueued, Enqueue)
    assert enqueued.item.evaluations == (("answer_relevancy", "fail"),)


def test_held_results_the_trace_cannot_take_are_handed_on_as_events() -> None:
    """A trace holds MAX_RESULTS results at most: more held for it (beyond those its spans
    carry) come back as events, as more than MAX_RESULTS joining do at once, and as every
    result of a trace that is no request."""
    assembly = SpanAssembly(AssemblyConfig(grace_s=0.0), MappingConfig())
    request = rag_spans()
    in_span = {"gen_ai.evaluation.name": "in_span", "gen_ai.evaluation.score.value": 1.0}
    request[-1] = replace(request[-1], events=(SpanEvent(EVALUATION_EVENT, 0, in_span),))
    trace_id = request[0].trace_id
    many = [EvaluationResult(f"e{i}", trace_id=trace_id) for i in range(MAX_RESULTS + 3)]
    assembly.add(request, "otlp", 0.0, None)
    assert assembly.join(many, 0.0, None).events == many[MAX_RESULTS:]
    [emitted] = assembly.due(0.0)
    assert emitted.trace is not None
    assert [r.name for r in emitted.trace.evaluations] == ["in_span"] + [
        r.name for r in many[: MAX_RESULTS - 1]
    ]
    assert emitted.events == (many[MAX_RESULTS - 1],)
    assembly.add([span("n1", "r")], "otlp", 1.0, None)  # no request: no LLM or retriever
    assembly.join([sent_apart("n1")], 1.0, None)
    [not_rag] = assembly.due(1.0)
    assert (not_rag.trace, not_rag.events) == (None, (sent_apart("n1"),))


def test_a_result_whose_trace_never_came_is_unmatched_and_no_trace() -> None:
    """Through the pipeline: a result that waited in vain for its trace's spans is handed on
    at last, counted unmatched under production, and no trace is counted for it."""
    registry = SidecarRegistry()
    assembly = SpanAssembly(AssemblyConfig(ttl_s=60.0), MappingConfig())
    rules = {"answer_relevancy": EvaluationRule(score_min=0.7)}
    detector = EvaluationsDetector(EvaluationsConfig(evaluations=rules), registry)
    pipeline = Pipeline(assembly, [detector], PipelineMetrics(registry))
    pipeline.start()
    pipeline.submit(Events([sent_apart("f1")], "kafka", Ticket()))
    pipeline.shutdown()  # the drain releases what waits
    results = {"evaluation": "answer_relevancy", "outcome": "pass", "variant": "production"}
    assert sample(registry, RESULTS_TOTAL, **results) == 1
    assert sample(registry, UNMATCHED_TOTAL) == 1
    assert sample(registry, "rag_monitor_assembled_traces_total") == 0
    assert sample(registry, "rag_monitor_events_total", type="evaluation_result") == 1
