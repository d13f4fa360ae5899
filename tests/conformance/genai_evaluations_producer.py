"""Producer for tests/conformance/test_genai_evaluations.py, run only by the python of the
venv that test builds (splunk-otel-util-genai 0.1.15 on opentelemetry 1.39, which cannot
share rag-monitor's environment).

The library's role is emitting, not judging: it has no judge of its own, so the results
are built from its EvaluationResult type and handed to its EvaluationEventsEmitter, the
way an evaluator package (splunk-otel-util-genai-evals) hands them over.

usage: python genai_evaluations_producer.py <sidecar base url> <requests>

Phase 1 emits the requests (a CHAIN root with an LLM child) over /v1/traces; the odd
requests carry their results as span events on the root, written by the library's
emitter through a logger that adds each record it emits to the span. The script then
prints "spans sent" and waits for a line on stdin (the sidecar has assembled the
requests), and phase 2 sends the even requests' results as OTLP log records to /v1/logs.
Last it prints one JSON line per record the library emitted: carrier, trace id, attributes.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Span, set_span_in_context
from opentelemetry.util.genai.emitters.evaluation import EvaluationEventsEmitter
from opentelemetry.util.genai.types import Error, EvaluationResult, LLMInvocation

SENT: list[dict[str, Any]] = []


class Recording:
    """A logger for the emitter: keeps what it emits, then hands it to ``sink``."""

    def __init__(self, carrier: str, sink: Any) -> None:
        self.carrier = carrier
        self.sink = sink

    def emit(self, record: Any) -> None:
        attributes = dict(record.attributes or {})
        trace_id = format(record.trace_id, "032x")
        SENT.append({"carrier": self.carrier, "trace_id": trace_id, "attributes": attributes})
        self.sink(record)


def span_events(span: Span) -> Any:
    """A sink that adds a record to ``span`` as an event of the record's name."""
    return lambda record: span.add_event(record.event_name, dict(record.attributes or {}))


def results_for(index: int) -> list[EvaluationResult]:
    """What the evaluators judged of request ``index``: a relevancy score, a faithfulness
    label, a metric the library does not emit, and every fifth request's judge failing."""
    results = [
        EvaluationResult("answer_relevancy", score=0.9 if index % 3 else 0.4),
        EvaluationResult("faithfulness", label="hallucinated" if index % 4 == 1 else "factual"),
        EvaluationResult("coherence", score=0.8),
    ]
    if index % 5 == 0:
        failed = Error(message="judge timed out", type=TimeoutError)
        results.append(EvaluationResult("faithfulness", error=failed))
    return results


def main(base: str, requests: int) -> None:
    resource = Resource.create({"service.name": "rag-app"})
    tracing = TracerProvider(resource=resource)
    tracing.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{base}/v1/traces")))
    tracer = tracing.get_tracer("rag-app")
    logging = LoggerProvider(resource=resource)
    exporter = OTLPLogExporter(endpoint=f"{base}/v1/logs")
    logging.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logs = Recording("logs", logging.get_logger("evaluator").emit)

    later: list[tuple[int, LLMInvocation]] = []
    for index in range(requests):
        variant = "canary" if index % 4 == 3 else "production"
        root = tracer.start_span("rag.request", attributes={
            "openinference.span.kind": "CHAIN", "input.value": "q", "output.value": "a",
            "rag.variant": variant})  # fmt: skip
        llm = tracer.start_span("generate", context=set_span_in_context(root),
                                attributes={"openinference.span.kind": "LLM",
                                            "llm.model_name": "gpt-4o-mini"})  # fmt: skip
        llm.end()
        invocation = LLMInvocation(request_model="gpt-4o-mini", response_id=f"resp-{index}")
        invocation.span = llm
        if index % 2:
            emitter = EvaluationEventsEmitter(Recording("span_events", span_events(root)))
            emitter.on_evaluation_results(results_for(index), invocation)
        else:
            later.append((index, invocation))
        root.end()
    tracing.force_flush()
    print("spans sent", flush=True)
    sys.stdin.readline()

    emitter = EvaluationEventsEmitter(logs)
    for index, invocation in later:
        emitter.on_evaluation_results(results_for(index), invocation)
    logging.shutdown()
    tracing.shutdown()
    for sent in SENT:
        print(json.dumps(sent), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
