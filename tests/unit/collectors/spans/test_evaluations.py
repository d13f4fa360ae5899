"""Evaluators' verdicts in spans: gen_ai.evaluation.result events and OpenInference
annotations map to RagTrace.evaluations; bad values read as absent, never crash."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

import pytest

from collectors.kafka.records import rag_trace_from_document
from collectors.spans.assembly import SpanAssembly
from collectors.spans.config import AssemblyConfig, MappingConfig
from collectors.spans.evaluations import EVALUATION_EVENT, MAX_RESULTS, evaluation_results
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span, SpanEvent
from monitor.contract.events import InvalidRecord
from monitor.contract.trace import EvaluationResult
from tests.unit.collectors.spans.test_openinference import TRACE, rag_spans, span


def _with(span: Span, *events: dict[str, Any], **attributes: Any) -> Span:
    return replace(
        span,
        attributes={**span.attributes, **attributes},
        events=tuple(SpanEvent(EVALUATION_EVENT, span.start_ns, event) for event in events),
    )


def test_genai_events_and_openinference_annotations_reach_the_trace() -> None:
    """A gen_ai.evaluation.result event on the LLM span and annotations/evaluations on
    the request span become the trace's evaluations, each naming its span."""
    spans = rag_spans()
    spans[4] = _with(spans[4], {
        "gen_ai.evaluation.name": "answer_relevancy", "gen_ai.evaluation.score.value": 0.82,
        "gen_ai.evaluation.score.label": "relevant", "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.evaluation.explanation": "on topic",
    })  # fmt: skip
    spans[0] = _with(spans[0], **{
        "annotations.0.annotation.name": "hallucination",
        "annotations.0.annotation.label": "factual",
        "annotations.0.annotation.score": 0,
        "annotations.0.annotation.annotator_kind": "LLM",
        "evaluations.0.evaluation.name": "qa_correctness",
        "evaluations.0.evaluation.score": 1.0,
    })  # fmt: skip
    trace = TraceMapper().build(spans, "otlp")
    assert trace is not None
    assert trace.evaluations == (
        EvaluationResult("hallucination", 0.0, "factual", trace_id=TRACE, span_id=spans[0].span_id),
        EvaluationResult("qa_correctness", 1.0, trace_id=TRACE, span_id=spans[0].span_id),
        EvaluationResult("answer_relevancy", 0.82, "relevant", "on topic", None, "chatcmpl-1",
                         TRACE, spans[4].span_id),
    )  # fmt: skip


def test_a_trace_without_verdicts_has_none() -> None:
    """No events or annotations: evaluations stays empty, as in older records."""
    trace = TraceMapper().build(rag_spans(), "otlp")
    assert trace is not None
    assert trace.evaluations == ()


def test_bad_values_read_as_absent() -> None:
    """No name, a NaN or string score, a boolean label, an error.type: kept and typed."""
    spans = rag_spans()
    spans[4] = _with(spans[4],
        {"gen_ai.evaluation.score.value": math.nan},
        {"gen_ai.evaluation.name": "x" * 1000, "gen_ai.evaluation.score.value": "0.9",
         "gen_ai.evaluation.score.label": True, "error.type": "timeout"},
    )  # fmt: skip
    first, second = evaluation_results(spans)
    assert (first.name, first.score) == (None, None)
    assert second.name == "x" * 256
    assert (second.score, second.label, second.error_type) == (None, None, "timeout")


def test_results_per_trace_are_bounded() -> None:
    """Thousands of annotations on a span give at most MAX_RESULTS results."""
    spans = rag_spans()
    many = {f"annotations.{i}.annotation.name": f"m{i}" for i in range(1000)}
    spans[0] = _with(spans[0], **many)
    many_events = [{"gen_ai.evaluation.name": f"e{i}"} for i in range(1000)]
    spans[4] = _with(spans[4], *many_events)
    assert len(evaluation_results(spans)) == MAX_RESULTS


# What arize-phoenix-evals 3.9 writes on its EVALUATOR span: json.dumps of Score.to_dict()s.
PHOENIX_SCORES = json.dumps([
    {"name": "relevance", "score": 1.0, "label": "relevant", "explanation": "on topic",
     "metadata": {"model": "gpt-4o-mini", "trace_id": TRACE}, "kind": "llm",
     "direction": "maximize"},
    {"name": "has_citation", "score": 0, "label": "False", "kind": "code"},
])  # fmt: skip
ANNOTATED: dict[str, Any] = {"annotations.0.annotation.name": "judge",
                             "annotations.0.annotation.score": 0.5}  # fmt: skip
EXCEPTION = SpanEvent("exception", 0, {"exception.type": "ValueError", "exception.message": "x"})


def _evaluator(output: Any = None, *events: SpanEvent, kind: str = "EVALUATOR",
               **attributes: Any) -> Span:  # fmt: skip
    if output is not None:
        attributes["output.value"] = output
    return replace(span("e1", "a1", kind, 1500, 1600, **attributes), events=events)


def test_evaluator_span_output_scores_reach_the_trace() -> None:
    """An EVALUATOR span's output.value score list (arize-phoenix-evals) becomes the trace's
    evaluations, each naming the evaluator span; its judge's LLM call is not the answer."""
    spans = [*rag_spans(), _evaluator(PHOENIX_SCORES),
             span("e2", "e1", "LLM", 1510, 1590, **{"output.value": '{"label": "relevant"}'})]  # fmt: skip
    trace = TraceMapper().build(spans, "otlp")
    assert trace is not None
    evaluator = "e1".ljust(16, "0")
    assert trace.evaluations == (
        EvaluationResult("relevance", 1.0, "relevant", "on topic", trace_id=TRACE,
                         span_id=evaluator),
        EvaluationResult("has_citation", 0.0, "False", trace_id=TRACE, span_id=evaluator),
    )  # fmt: skip
    assert trace.answer == "a."


@pytest.mark.parametrize(
    ("evaluator", "expected"),
    [
        (_evaluator(None, EXCEPTION, EXCEPTION), [(None, None, "ValueError")]),
        (_evaluator(None, SpanEvent("exception", 0, {})), [(None, None, "exception")]),
        (_evaluator(PHOENIX_SCORES, EXCEPTION), [("relevance", 1.0, None), ("has_citation", 0.0, None)]),
        (_evaluator(PHOENIX_SCORES, **ANNOTATED), [("judge", 0.5, None)]),
        (_evaluator(PHOENIX_SCORES, kind="CHAIN"), []),
        (_evaluator(None), []),
        (_evaluator("relevant"), []),
        (_evaluator('{"name": "relevance", "score": 1}'), []),
        (_evaluator("[" * 5000 + "]" * 5000), []),
        (_evaluator("[{"), []),
        (_evaluator(json.dumps([1, "x", None, {"kind": "llm"}, {"score": "0.9"}])),
         [(None, None, None)]),
        (_evaluator(json.dumps([{"name": f"m{i}"} for i in range(1000)])),
         [(f"m{i}", None, None) for i in range(MAX_RESULTS)]),
    ],
    ids=["raised-twice", "raised-untyped", "scores-win-over-exception",
         "attributes-win-over-output", "not-an-evaluator", "no-output", "plain-text",
         "object-not-list", "deeply-nested", "invalid-json", "entries-without-fields",
         "bounded"],
)  # fmt: skip
def test_evaluator_span_failures_and_other_outputs(
    evaluator: Span, expected: list[tuple[Any, ...]]
) -> None:
    """A judge that raised and wrote no verdict is one error result without a name; a
    verdict the span carries otherwise wins; any other output gives nothing, never a crash."""
    results = evaluation_results([evaluator])
    assert [(result.name, result.score, result.error_type) for result in results] == expected


def test_rag_trace_records_carry_evaluations_and_refuse_nan() -> None:
    """A rag-trace/1 record may list evaluations; a NaN score is refused with its path."""
    record = {"schema": "rag-trace/1", "trace_id": "ab",
              "evaluations": [{"name": "faithfulness_llm", "score": 0.5}]}  # fmt: skip
    trace = rag_trace_from_document(record, "kafka")
    assert trace.evaluations == (EvaluationResult("faithfulness_llm", 0.5),)
    record["evaluations"] = [{"name": "faithfulness_llm", "score": math.nan}]
    with pytest.raises(InvalidRecord, match=r"evaluations\.0\.score"):
        rag_trace_from_document(record, "kafka")


GENAI_VERDICT = {"gen_ai.evaluation.name": "answer_relevancy",
                 "gen_ai.evaluation.score.value": 0.9, "gen_ai.response.id": "chatcmpl-1"}  # fmt: skip


@pytest.mark.parametrize(
    ("late", "expected"),
    [
        (_with(span("e1", "a1", "EVALUATOR", 2200, 2300), GENAI_VERDICT),
         [("answer_relevancy", 0.9, "chatcmpl-1", "e1")]),
        (_with(span("e1", "a1", "CHAIN", 2200, 2300), **ANNOTATED), [("judge", 0.5, None, "e1")]),
        (_evaluator(PHOENIX_SCORES), [("relevance", 1.0, None, "e1"), ("has_citation", 0.0, None, "e1")]),
        (_evaluator(None, EXCEPTION), [(None, None, None, "e1")]),
        (span("c9", "a1", "CHAIN", 2200, 2300), []),
    ],
    ids=["genai-event", "annotation", "evaluator-output", "evaluator-failed", "no-verdict"],
)  # fmt: skip
def test_a_late_spans_verdicts_are_events_joined_by_trace_id(
    late: Span, expected: list[tuple[Any, ...]]
) -> None:
    """A span arriving after its trace was emitted is dropped and counted as late; each
    verdict it carries is handed on as an event naming the trace (and gen_ai.response.id)."""
    assembly = SpanAssembly(AssemblyConfig(grace_s=0.0), MappingConfig())
    assembly.add(rag_spans(), "otlp", now=0.0, ticket=None)
    [emitted] = assembly.due(now=0.0)
    assert emitted.trace is not None
    added = assembly.add([late], "otlp", now=1.0, ticket=None)
    assert (added.late, added.evicted, assembly.pending) == (1, [], 0)
    results = [event for event in added.events if isinstance(event, EvaluationResult)]
    assert len(results) == len(added.events)
    assert {result.trace_id for result in results} <= {TRACE}
    got = [(r.name, r.score, r.response_id, str(r.span_id)[:2]) for r in results]
    assert got == expected
