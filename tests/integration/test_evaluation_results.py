"""Evaluation results into a running sidecar from the real OpenTelemetry SDK: a
gen_ai.evaluation.result span event and OpenInference annotations inside traces, and
log records over OTLP/HTTP and OTLP/gRPC joined to their requests by trace id."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

import pytest
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from detectors.evaluations.names import RESULTS_TOTAL, UNMATCHED_TOTAL
from monitor.detector import InlineDetector
from monitor.intake import Events
from monitor.sidecar import Sidecar
from monitor.trace import EvaluationResult, Event, JudgeScore
from tests.conftest import sample, wait_until
from tests.otel_traffic import RagRequest, emit_rag_request, tracer_for

pytestmark = pytest.mark.integration

EVALUATIONS = {
    "evaluations": {
        "answer_relevancy": {"score_min": 0.7, "sample_rate": 0.5},
        "hallucination": {"labels": ["factual"]},
    }
}
EVENT = "gen_ai.evaluation.result"


def _context(trace_id: str, span_id: int = 0x1234) -> Context:
    span = SpanContext(int(trace_id, 16), span_id, is_remote=True,
                       trace_flags=TraceFlags(TraceFlags.SAMPLED))  # fmt: skip
    return set_span_in_context(NonRecordingSpan(span))


def _annotation(label: str) -> dict[str, object]:
    return {"annotations.0.annotation.name": "hallucination",
            "annotations.0.annotation.label": label,
            "annotations.0.annotation.annotator_kind": "LLM"}  # fmt: skip


def test_results_from_spans_and_logs_count_per_evaluation_outcome_and_request(
    start_sidecar: Callable[..., Sidecar],
) -> None:
    """Two requests (production, canary) with annotations, one with a span event; log
    records over HTTP and gRPC naming them (and one naming no known trace, one without a
    name, one plain log line): every result counted under its request's variant."""
    sidecar = start_sidecar(detectors={"evaluations": EVALUATIONS,
                                       "faithfulness": {"enabled": False}},
                            assembly={"grace_s": 1.0})  # fmt: skip
    http = f"http://127.0.0.1:{sidecar.http.port}"  # type: ignore[union-attr]
    _, tracer = tracer_for(HttpSpans(endpoint=f"{http}/v1/traces"))
    start = time.time_ns()
    first = emit_rag_request(tracer, RagRequest(start, extra=_annotation("factual")))
    judge = tracer.start_span("evaluate", context=_context(first), attributes={
        "openinference.span.kind": "EVALUATOR"})  # fmt: skip
    judge.add_event(EVENT, {"gen_ai.evaluation.name": "answer_relevancy",
                            "gen_ai.evaluation.score.value": 0.9})  # fmt: skip
    judge.end()
    canary = {**_annotation("hallucinated"), "rag.variant": "canary"}
    second = emit_rag_request(tracer, RagRequest(start, extra=canary))
    registry = sidecar.registry
    wait_until(lambda: sample(registry, "rag_requests_total") >= 2)

    logs = LoggerProvider()
    logs.add_log_record_processor(SimpleLogRecordProcessor(HttpLogs(endpoint=f"{http}/v1/logs")))
    grpc_port = sidecar.grpc.port  # type: ignore[union-attr]
    grpc = GrpcLogs(endpoint=f"127.0.0.1:{grpc_port}", insecure=True)
    logs.add_log_record_processor(SimpleLogRecordProcessor(grpc))
    logger = logs.get_logger("evaluator")
    for trace_id, score in ((second, 0.3), ("0" * 31 + "f", 0.9), (first, 0.5)):
        logger.emit(event_name=EVENT, context=_context(trace_id), attributes={
            "gen_ai.evaluation.name": "answer_relevancy",
            "gen_ai.evaluation.score.value": score})  # fmt: skip
    logger.emit(event_name=EVENT, context=_context(first), attributes={"error.type": "timeout"})
    logger.emit(body="a plain log line")
    logs.shutdown()

    def results(evaluation: str, outcome: str, variant: str = "production") -> float:
        return sample(registry, RESULTS_TOTAL, evaluation=evaluation, outcome=outcome,
                      variant=variant)  # fmt: skip

    # every log record went through both exporters: once over HTTP, once over gRPC
    wait_until(lambda: results("none", "error") >= 2)
    assert results("answer_relevancy", "pass") == 1 + 2  # the span event; the unknown trace
    assert results("answer_relevancy", "fail") == 2
    assert results("answer_relevancy", "fail", "canary") == 2
    assert results("hallucination", "pass") == 1
    assert results("hallucination", "fail", "canary") == 1
    assert sample(registry, UNMATCHED_TOTAL) == 2
    for kind, expected in (("evaluation", 4), ("ignored", 1)):
        for_both = sample(registry, "rag_monitor_log_records_total", collector="otlp", kind=kind)
        assert for_both == 2 * expected, kind


class Recorder(InlineDetector):
    """Keeps the evaluation events a sidecar's pipeline hands its detectors."""

    name: ClassVar[str] = "recorder"

    def __init__(self) -> None:
        self.results: list[EvaluationResult] = []

    def observe_event(self, event: Event) -> None:
        if isinstance(event, EvaluationResult):
            self.results.append(event)


def test_judged_scores_arrive_at_another_sidecar_as_log_records(
    start_sidecar: Callable[..., Sidecar],
) -> None:
    """A sidecar with detectors.evaluations.emit sends each JudgeScore its judge emits as a
    gen_ai.evaluation.result record to a second sidecar's /v1/logs: name faithfulness,
    score, label, the trace id and the request's root span id."""
    recorder = Recorder()
    receiving = start_sidecar(
        extra_detectors=[recorder],
        detectors={"evaluations": {"evaluations": {"faithfulness": {"score_min": 0.5}}},
                   "faithfulness": {"enabled": False}},
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{receiving.http.port}/v1/logs"  # type: ignore[union-attr]
    judging = start_sidecar(detectors={"evaluations": {"emit": {"endpoint": endpoint}},
                                       "faithfulness": {"enabled": False}})  # fmt: skip
    _, tracer = tracer_for(HttpSpans(endpoint=f"http://127.0.0.1:{judging.http.port}/v1/traces"))  # type: ignore[union-attr]
    trace_ids = [emit_rag_request(tracer, RagRequest(time.time_ns())) for _ in range(2)]
    wait_until(lambda: sample(judging.registry, "rag_requests_total") >= 2)
    # What the faithfulness detector emits once its judge has scored (monitor.components.EventHook)
    scores = [JudgeScore(trace_ids[0], 0.9, 0.5), JudgeScore(trace_ids[1], 0.2, 0.5)]
    assert judging.pipeline.submit(Events(tuple(scores), "internal"), timeout=5)
    wait_until(lambda: len(recorder.results) >= 2)
    by_trace = {result.trace_id: result for result in recorder.results}
    assert set(by_trace) == set(trace_ids)
    for score in scores:
        result = by_trace[score.trace_id]
        assert (result.name, result.score) == ("faithfulness", score.score)
        assert result.label == ("faithful" if score.score >= 0.5 else "unfaithful")
        assert result.span_id is not None  # the request's root span
    registry = receiving.registry
    for outcome in ("pass", "fail"):
        assert sample(registry, RESULTS_TOTAL, evaluation="faithfulness", outcome=outcome,
                      variant="production") == 1  # fmt: skip
