"""Evaluators' verdicts carried in spans, as ``EvaluationResult`` values.

Four shapes (docs, "Bring your own evaluator"):

- the OpenTelemetry GenAI event ``gen_ai.evaluation.result`` on the evaluated span:
  ``gen_ai.evaluation.name``, ``gen_ai.evaluation.score.value``,
  ``gen_ai.evaluation.score.label``, ``gen_ai.evaluation.explanation``,
  ``gen_ai.response.id``, ``error.type``;
- OpenInference feedback attributes on a span, indexed:
  ``annotations.<i>.annotation.{name,score,label,explanation}`` and the same under
  ``evaluations.<i>.evaluation.*``, span-scoped or trace-scoped (``trace.annotations``,
  ``trace.evaluations``); an EVALUATOR span carries its verdict this way;
- an EVALUATOR span with neither carries its verdicts in ``output.value``: a JSON list
  of ``{name, score, label, explanation}`` objects (arize-phoenix-evals writes its
  ``Score.to_dict()`` list there); one that wrote none and recorded an ``exception``
  event is a failed judge: one error result, without a name;
- the same ``gen_ai.evaluation.*`` attributes of a log record (``collectors/otlp/logs.py``).

A value of the wrong type reads as absent (a NaN or infinite score too), never trusted;
a result without a name is kept with none, so the detector counts it. At most
``MAX_RESULTS`` a trace: a producer cannot make one request hold unbounded results.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from collectors.spans.kinds import span_kind
from collectors.spans.span import Span
from collectors.spans.text import io_value, number
from monitor.contract.trace import EvaluationResult

EVALUATION_EVENT = "gen_ai.evaluation.result"
EXCEPTION_EVENT = "exception"  # OpenTelemetry's event for a recorded exception
MAX_RESULTS = 256  # RagTrace.evaluations' bound
MAX_VALUE_LENGTH = 256
# (attribute prefix, inner key) of OpenInference's feedback attributes.
OPENINFERENCE_FEEDBACK = (
    ("annotations", "annotation"),
    ("evaluations", "evaluation"),
    ("trace.annotations", "annotation"),
    ("trace.evaluations", "evaluation"),
)
# A feedback entry holds at least one of these.
FEEDBACK_FIELDS = ("name", "score", "label")
# What the first entry of each feedback family holds: entries are read from index 0 up, so
# a span with none of these names carries no feedback. Almost no span carries any, and
# one set test against the span's names costs less than a lookup per family and field.
_FIRST_FEEDBACK_KEYS = frozenset(
    f"{prefix}.0.{inner}.{field}"
    for prefix, inner in OPENINFERENCE_FEEDBACK
    for field in FEEDBACK_FIELDS
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


def _feedback(values: Mapping[str, Any], prefix: str, span: Span) -> EvaluationResult:
    """OpenInference feedback: ``<prefix>{name,score,label,explanation}`` of ``values``."""
    explanation = values.get(prefix + "explanation")
    return EvaluationResult(
        name=_short(values.get(prefix + "name")),
        score=number(values.get(prefix + "score")),
        label=_short(values.get(prefix + "label")),
        explanation=explanation if isinstance(explanation, str) else None,
        trace_id=span.trace_id,
        span_id=span.span_id,
    )


def _openinference_results(span: Span) -> list[EvaluationResult]:
    attributes = span.attributes
    found = []
    for prefix, inner in OPENINFERENCE_FEEDBACK:
        for index in range(MAX_RESULTS):
            key = f"{prefix}.{index}.{inner}."
            if not any(key + field in attributes for field in FEEDBACK_FIELDS):
                break
            found.append(_feedback(attributes, key, span))
    return found


def _evaluator_output_results(span: Span) -> list[EvaluationResult]:
    """An EVALUATOR span's ``output.value`` verdicts, or its failure as an error result."""
    _, output = io_value(span.attributes, "output")
    verdicts = output if isinstance(output, list) else []
    results = [
        _feedback(verdict, "", span)
        for verdict in verdicts[:MAX_RESULTS]
        if isinstance(verdict, dict) and any(field in verdict for field in FEEDBACK_FIELDS)
    ]
    failure = next((event for event in span.events if event.name == EXCEPTION_EVENT), None)
    if not results and failure is not None:
        error_type = _short(failure.attributes.get("exception.type")) or EXCEPTION_EVENT
        results.append(EvaluationResult(error_type=error_type, trace_id=span.trace_id,
                                        span_id=span.span_id))  # fmt: skip
    return results


def _span_results(span: Span, kind: str) -> list[EvaluationResult]:
    found = [
        genai_result(event.attributes, span.trace_id, span.span_id)
        for event in span.events
        if event.name == EVALUATION_EVENT
    ]
    if not span.attributes.keys().isdisjoint(_FIRST_FEEDBACK_KEYS):
        found.extend(_openinference_results(span))
    if not found and kind == "EVALUATOR":
        return _evaluator_output_results(span)
    return found


def add_results(results: list[EvaluationResult], span: Span, kind: str) -> None:
    """Add the verdicts ``span`` (of ``kind``) carries to ``results``, up to ``MAX_RESULTS``:
    those of its events, its feedback attributes and, for an EVALUATOR span without
    either, its output."""
    # Nearly every span carries no verdict: without events, a feedback name or the
    # EVALUATOR kind it costs one set test, not a list.
    if (
        not span.events
        and kind != "EVALUATOR"
        and span.attributes.keys().isdisjoint(_FIRST_FEEDBACK_KEYS)
    ):
        return
    if len(results) < MAX_RESULTS:
        results.extend(_span_results(span, kind)[: MAX_RESULTS - len(results)])


def evaluation_results(spans: Sequence[Span]) -> tuple[EvaluationResult, ...]:
    """Every verdict the spans carry, in span order, at most ``MAX_RESULTS``: those of spans
    that came apart from their trace (the mapper reads a trace's in its pass over the
    spans, ``collectors.spans.stages``)."""
    results: list[EvaluationResult] = []
    for span in spans:
        add_results(results, span, span_kind(span))
    return tuple(results)
