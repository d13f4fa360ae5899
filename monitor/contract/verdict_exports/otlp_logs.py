"""What rag-monitor judges, sent on as OpenTelemetry ``gen_ai.evaluation.result`` log
records (configured as ``detectors.evaluations.emit``) to an OTLP/HTTP logs endpoint (an
OpenTelemetry Collector, Phoenix, another rag-monitor's ``/v1/logs``), each parented to its
request's root span, so that any backend that reads the GenAI conventions sees the verdict
beside the trace:

- faithfulness (a ``JudgeScore`` event): the score, labelled faithful or unfaithful, with
  the judge's identity as ``gen_ai.evaluation.evaluator.id`` (the name the open proposal
  for evaluator provenance, semantic-conventions-genai pull request 359, gives it), so
  that scores of two judges are never compared as one;
- faithfulness settled without a score (an ``UnscoredAnswer`` event): no score, and the
  outcome (no_answer, no_claims, refusal, no_context, error) as ``error.type``, the
  convention's low-cardinality class of what ended the evaluation without a result;
- retrieval_false_exclusion (an ``ExclusionOutcome`` of a labeled query with eligible
  gold): the share of the eligible gold a relevance filter removed, labelled excluded
  (all of it: a false exclusion) or not_excluded.

Drift test results are not sent: the convention's event is the evaluation of one GenAI
output, parented to that operation's span or naming its ``gen_ai.response.id``; a drift
test compares a window of many requests' queries with a reference and has neither, so a
receiver could join it to nothing (rag-monitor counts such a result as unmatched). Its
figures are time series already (``rag_drift_*`` on ``/metrics``).

Records are batched and exported off the pipeline thread (the SDK's batch processor);
one that cannot be delivered is dropped by the SDK after its retries, never blocking.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context
from opentelemetry.util.types import AttributeValue

from monitor.contract.trace import ExclusionOutcome, JudgeScore, UnscoredAnswer
from monitor.contract.verdict_exports.config import EmitConfig

EVENT = "gen_ai.evaluation.result"
EVALUATOR_ID = "gen_ai.evaluation.evaluator.id"
FALSE_EXCLUSION = "retrieval_false_exclusion"
Verdict = JudgeScore | UnscoredAnswer | ExclusionOutcome


def record_attributes(verdict: Verdict, faithfulness_name: str) -> dict[str, AttributeValue]:
    """The record's ``gen_ai.evaluation.*`` (and ``error.type``) attributes."""
    if isinstance(verdict, ExclusionOutcome):
        label = "excluded" if verdict.excluded else "not_excluded"
        share = verdict.excluded_share
        score = {} if share is None else {"gen_ai.evaluation.score.value": share}
        return {
            "gen_ai.evaluation.name": FALSE_EXCLUSION,
            **score,
            "gen_ai.evaluation.score.label": label,
        }
    if isinstance(verdict, UnscoredAnswer):
        return {
            "gen_ai.evaluation.name": faithfulness_name,
            EVALUATOR_ID: verdict.judge,
            "error.type": verdict.outcome,
        }
    label = "faithful" if verdict.score >= verdict.threshold else "unfaithful"
    return {
        "gen_ai.evaluation.name": faithfulness_name,
        EVALUATOR_ID: verdict.judge,
        "gen_ai.evaluation.score.value": verdict.score,
        "gen_ai.evaluation.score.label": label,
    }


class EvaluationEmitter:
    """Sends each verdict as a log record; ``shutdown`` flushes what is batched."""

    def __init__(self, config: EmitConfig) -> None:
        self._name = config.evaluation_name
        self._provider = LoggerProvider(resource=Resource.create({"service.name": "rag-monitor"}))
        exporter = OTLPLogExporter(endpoint=config.endpoint, timeout=config.timeout_s)
        self._provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
        self._logger = self._provider.get_logger("rag_monitor.evaluations")

    def emit(self, verdict: Verdict, root_span_id: str | None) -> None:
        """One record for ``verdict``, in its request's trace (under its root span when known)."""
        try:
            trace_id = int(verdict.trace_id, 16)
            span_id = int(root_span_id, 16) if root_span_id else 0
        except ValueError:
            return  # an id that is not hex (a rag-trace record's own id) has no OTLP form
        span = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(1))
        self._logger.emit(
            event_name=EVENT,
            context=set_span_in_context(NonRecordingSpan(span)),
            attributes=record_attributes(verdict, self._name),
        )

    def shutdown(self) -> None:
        self._provider.shutdown()
