"""What rag-monitor judges, sent on as OpenTelemetry ``gen_ai.evaluation.result`` log
records (``detectors.evaluations.emit``): each faithfulness score a judge of this sidecar
gives (a ``JudgeScore`` event) goes to an OTLP/HTTP logs endpoint (an OpenTelemetry
Collector, Phoenix, another rag-monitor's ``/v1/logs``) parented to the request's root
span, so any backend that reads the GenAI conventions sees the verdict beside the trace.

Records are batched and exported off the pipeline thread (the SDK's batch processor);
one that cannot be delivered is dropped by the SDK after its retries, never blocking.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from detectors.evaluations.config import EmitConfig
from monitor.trace import JudgeScore

EVENT = "gen_ai.evaluation.result"


class EvaluationEmitter:
    """Sends each judged score as a log record; ``shutdown`` flushes what is batched."""

    def __init__(self, config: EmitConfig) -> None:
        self._name = config.evaluation_name
        self._provider = LoggerProvider(resource=Resource.create({"service.name": "rag-monitor"}))
        exporter = OTLPLogExporter(endpoint=config.endpoint, timeout=config.timeout_s)
        self._provider.add_log_record_processor(BatchLogRecordProcessor(exporter))
        self._logger = self._provider.get_logger("rag_monitor.evaluations")

    def emit(self, score: JudgeScore, root_span_id: str | None) -> None:
        """One record for ``score``, in its request's trace (under its root span when known)."""
        try:
            trace_id = int(score.trace_id, 16)
            span_id = int(root_span_id, 16) if root_span_id else 0
        except ValueError:
            return  # an id that is not hex (a rag-trace record's own id) has no OTLP form
        span = SpanContext(trace_id, span_id, is_remote=True, trace_flags=TraceFlags(1))
        label = "faithful" if score.score >= score.threshold else "unfaithful"
        self._logger.emit(
            event_name=EVENT,
            context=set_span_in_context(NonRecordingSpan(span)),
            attributes={
                "gen_ai.evaluation.name": self._name,
                "gen_ai.evaluation.score.value": score.score,
                "gen_ai.evaluation.score.label": label,
            },
        )

    def shutdown(self) -> None:
        self._provider.shutdown()
