"""Evaluators' verdicts carried in spans, as ``EvaluationResult`` values.

Three shapes (docs, "Bring your own evaluator"):

- the OpenTelemetry GenAI event ``gen_ai.evaluation.result`` on the evaluated span:
  ``gen_ai.evaluation.name``, ``gen_ai.evaluation.score.value``,
  ``gen_ai.evaluation.score.label``, ``gen_ai.evaluation.explanation``,
  ``gen_ai.response.id``, ``error.type``;
- OpenInference feedback attributes on a span, indexed:
  ``annotations.<i>.annotation.{name,score,label,explanation}`` and the same under
  ``evaluations.<i>.evaluation.*``, span-scoped or trace-scoped (``trace.annotations``,
  ``trace.evaluations``); an EVALUATOR span carries its verdict this way;
- the same ``gen_ai.evaluation.*`` attributes of a log record (``collectors/otlp_logs.py``).

A value of the wrong type reads as absent (a NaN or infinite score too), never trusted;
a result without a name is kept with none, so the detector counts it. At most
``MAX_RESULTS`` a trace: a producer cannot make one request hold unbounded results.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from collectors.otlp import Span
from collectors.span_text import number
from monitor.trace import EvaluationResult

EVALUATION_EVENT = "gen_ai.evaluation.result"
MAX_RESULTS = 256  # RagTrace.evaluations' bound
MAX_VALUE_LENGTH = 256
# (attribute prefix, inner key) of OpenInference's feedback attributes.
OPENINFERENCE_FEEDBACK = (
    ("annotations", "annotation"),
    ("evaluations", "evaluation"),
    ("trace.annotations", "annotation"),
    ("trace.evaluations", "evaluation"),
)


def _short(value: Any) -> str | None:
    """A non-empty string cut to ``MAX_VALUE_LENGTH``; anything else reads as absent."""
    if not isinstance(value, str) or not value.strip():
        return None
    return value[:MAX_VALUE_LENGTH]


def genai_result(
    attributes: Mapping[str, Any], trace_id: str | None, span_id: str | None
) -> EvaluationResult:
    """A ``gen_ai.evaluation.result`` event's (or log record's) attributes."""
    explanation = attributes.get("gen_ai.evaluation.explanation")
    return EvaluationResult(
        name=_short(attributes.get("gen_ai.evaluation.name")),
        score=number(attributes.get("gen_ai.evaluation.score.value")),
        label=_short(attributes.get("gen_ai.evaluation.score.label")),
        explanation=explanation if isinstance(explanation, str) else None,
        error_type=_short(attributes.get("error.type")),
        response_id=_short(attributes.get("gen_ai.response.id")),
        trace_id=trace_id,
        span_id=span_id,
    )


def _openinference_results(span: Span) -> Iterator[EvaluationResult]:
    attributes = span.attributes
    for prefix, inner in OPENINFERENCE_FEEDBACK:
        for index in range(MAX_RESULTS):
            key = f"{prefix}.{index}.{inner}."
            fields = ("name", "score", "label")
            if not any(key + field in attributes for field in fields):
                break
            explanation = attributes.get(key + "explanation")
            yield EvaluationResult(
                name=_short(attributes.get(key + "name")),
                score=number(attributes.get(key + "score")),
                label=_short(attributes.get(key + "label")),
                explanation=explanation if isinstance(explanation, str) else None,
                trace_id=span.trace_id,
                span_id=span.span_id,
            )


def _span_results(span: Span) -> Iterator[EvaluationResult]:
    for event in span.events:
        if event.name == EVALUATION_EVENT:
            yield genai_result(event.attributes, span.trace_id, span.span_id)
    yield from _openinference_results(span)


def evaluation_results(spans: Sequence[Span]) -> tuple[EvaluationResult, ...]:
    """Every verdict the spans carry, in span order, at most ``MAX_RESULTS``."""
    results: list[EvaluationResult] = []
    for span in spans:
        for result in _span_results(span):
            results.append(result)
            if len(results) == MAX_RESULTS:
                return tuple(results)
    return tuple(results)
