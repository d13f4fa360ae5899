"""Evaluators' verdicts in spans: gen_ai.evaluation.result events and OpenInference
annotations map to RagTrace.evaluations; bad values read as absent, never crash."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import pytest

from collectors.openinference import TraceMapper
from collectors.otlp import Span, SpanEvent
from collectors.records import rag_trace_from_document
from collectors.span_evaluations import EVALUATION_EVENT, MAX_RESULTS, evaluation_results
from monitor.events import InvalidRecord
from monitor.trace import EvaluationResult
from tests.unit.test_openinference import TRACE, rag_spans


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


def test_rag_trace_records_carry_evaluations_and_refuse_nan() -> None:
    """A rag-trace/1 record may list evaluations; a NaN score is refused with its path."""
    record = {"schema": "rag-trace/1", "trace_id": "ab",
              "evaluations": [{"name": "faithfulness_llm", "score": 0.5}]}  # fmt: skip
    trace = rag_trace_from_document(record, "kafka")
    assert trace.evaluations == (EvaluationResult("faithfulness_llm", 0.5),)
    record["evaluations"] = [{"name": "faithfulness_llm", "score": math.nan}]
    with pytest.raises(InvalidRecord, match=r"evaluations\.0\.score"):
        rag_trace_from_document(record, "kafka")
