"""Evaluation results into a running sidecar from the real OpenTelemetry SDK: a
gen_ai.evaluation.result span event and OpenInference annotations inside traces, and
log records over OTLP/HTTP and OTLP/gRPC joined to their requests by trace id."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import ClassVar

import orjson
import pytest
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogs
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogs
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags, set_span_in_context

from detectors.evaluations.names import DUPLICATES_TOTAL, RESULTS_TOTAL, UNMATCHED_TOTAL
from monitor.contract.detector import InlineDetector
from monitor.contract.trace import EvaluationResult, Event, JudgeScore, RagTrace
from monitor.contract.work_items import Events
from monitor.runtime.sidecar import Sidecar
from tests.conftest import sample, wait_until
from tests.fake_openai import Script, fake_openai
from tests.integration.conftest import post
from tests.integration.test_llm_judge import KEY, KEY_ENV, settings
from tests.otel_traffic import RagRequest, emit_rag_request, filter_attributes, tracer_for

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
    name, one plain log line): every result counted once under its request's variant, the
    copy the other exporter sent as a duplicate; the one naming no known trace, after
    waiting ttl_s for its spans, as unmatched."""
    sidecar = start_sidecar(detectors={"evaluations": EVALUATIONS,
                                       "faithfulness": {"enabled": False}},
                            collectors={"spans": {"assembly": {"grace_s": 1.0,
                                                               "ttl_s": 2.0}}})  # fmt: skip
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

    # every log record went through both exporters: once over HTTP, once over gRPC; the
    # second copy of each is a duplicate (the unknown trace's after ttl_s)
    wait_until(lambda: sample(registry, DUPLICATES_TOTAL) >= 4)
    assert results("none", "error") == 1
    assert results("answer_relevancy", "pass") == 1 + 1  # the span event; the unknown trace
    assert results("answer_relevancy", "fail") == 1
    assert results("answer_relevancy", "fail", "canary") == 1
    assert results("hallucination", "pass") == 1
    assert results("hallucination", "fail", "canary") == 1
    assert sample(registry, UNMATCHED_TOTAL) == 1
    for kind, expected in (("evaluation", 4), ("ignored", 1)):
        for_both = sample(registry, "rag_monitor_log_records_total", collector="otlp", kind=kind)
        assert for_both == 2 * expected, kind


def test_results_in_spans_after_their_request_was_emitted_count_as_events(
    start_sidecar: Callable[..., Sidecar],
) -> None:
    """An evaluator that runs after its request was emitted, exporting an EVALUATOR span with
    the gen_ai.evaluation.result event and a span with an annotation in the request's trace:
    the spans are late, each result counts under the request's variant, none unmatched."""
    sidecar = start_sidecar(detectors={"evaluations": EVALUATIONS,
                                       "faithfulness": {"enabled": False}},
                            collectors={"spans": {"assembly": {"grace_s": 0.2}}})  # fmt: skip
    http = f"http://127.0.0.1:{sidecar.http.port}"  # type: ignore[union-attr]
    provider, tracer = tracer_for(HttpSpans(endpoint=f"{http}/v1/traces"))
    request = emit_rag_request(tracer, RagRequest(time.time_ns(), extra={"rag.variant": "canary"}))
    registry = sidecar.registry
    wait_until(lambda: sample(registry, "rag_requests_total") == 1)

    judge = tracer.start_span("evaluate", context=_context(request), attributes={
        "openinference.span.kind": "EVALUATOR"})  # fmt: skip
    judge.add_event(EVENT, {"gen_ai.evaluation.name": "answer_relevancy",
                            "gen_ai.evaluation.score.value": 0.9})  # fmt: skip
    judge.end()
    tracer.start_span("annotate", context=_context(request),
                      attributes=_annotation("hallucinated")).end()  # fmt: skip
    provider.shutdown()

    def results(evaluation: str, outcome: str) -> float:
        return sample(registry, RESULTS_TOTAL, evaluation=evaluation, outcome=outcome,
                      variant="canary")  # fmt: skip

    wait_until(lambda: sample(registry, "rag_monitor_late_spans_total") == 2)
    assert results("answer_relevancy", "pass") == 1
    assert results("hallucination", "fail") == 1
    assert sample(registry, UNMATCHED_TOTAL) == 0
    assert sample(registry, "rag_monitor_events_total", type="evaluation_result") == 2
    assert sample(registry, "rag_requests_total") == 1


class Recorder(InlineDetector):
    """Keeps the evaluation events a sidecar's pipeline hands its detectors."""

    name: ClassVar[str] = "recorder"

    def __init__(self) -> None:
        self.results: list[EvaluationResult] = []

    def observe_event(self, event: Event) -> None:
        if isinstance(event, EvaluationResult):
            self.results.append(event)


class RootSpans(InlineDetector):
    """Keeps the root span id of each trace a sidecar's pipeline assembles."""

    name: ClassVar[str] = "root_spans"

    def __init__(self) -> None:
        self.by_trace: dict[str, str | None] = {}

    def observe(self, trace: RagTrace) -> None:
        self.by_trace[trace.trace_id] = trace.root_span_id


# The judging sidecar's traffic: what each request is and the records it must give.
JUDGED = "It is described in d1."  # the fake judge: its one claim is supported (1.0)
BROKEN = "The reply is not JSON."  # the fake judge's reply cannot be read: error
SCRIPT = Script({JUDGED: ["d1 describes it."], BROKEN: ["A claim."]},
                {"d1 describes it.": True, "A claim.": True}, {BROKEN: ["malformed"]})  # fmt: skip
REQUESTS: dict[str, dict[str, object]] = {
    "scored": {"output.value": JUDGED, **filter_attributes(relevance_excluded=["g1"])},
    "error": {"output.value": BROKEN},
    "no_context": {},  # sent without documents
    "no_answer": {"output.value": ""},
}
LABELS = {"scored": ["g1"], "error": ["d1"]}  # g1 removed by a filter; d1 retrieved
# (request, evaluation) -> (score, label, error.type) of the record it must give
EXPECTED = {
    ("scored", "faithfulness"): (1.0, "faithful", None),
    ("error", "faithfulness"): (None, None, "error"),
    ("no_context", "faithfulness"): (None, None, "no_context"),
    ("no_answer", "faithfulness"): (None, None, "no_answer"),
    ("scored", "retrieval_false_exclusion"): (1.0, "excluded", None),
    ("error", "retrieval_false_exclusion"): (0.0, "not_excluded", None),
}


def test_verdicts_arrive_at_another_sidecar_as_log_records(
    start_sidecar: Callable[..., Sidecar], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sidecar with detectors.evaluations.emit, judging OTLP traffic with an LLM judge (a
    fake OpenAI server), sends a second sidecar's /v1/logs one gen_ai.evaluation.result per
    verdict, in the request's trace under its root span: faithfulness scored, errored and
    settled (no_context, no_answer as error.type, no score), and each labeled query's
    retrieval_false_exclusion share and label; the receiver counts them by outcome. A score
    of a request the sidecar never saw is not sent."""
    monkeypatch.setenv(KEY_ENV, KEY)
    recorder, roots = Recorder(), RootSpans()
    receiving = start_sidecar(
        extra_detectors=[recorder],
        detectors={"evaluations": {"evaluations": {
                       "faithfulness": {"score_min": 0.5},
                       "retrieval_false_exclusion": {"labels": ["not_excluded"]}}},
                   "faithfulness": {"enabled": False}},
        # it never sees the requests' spans: each record waits ttl_s for them, then counts
        collectors={"spans": {"assembly": {"ttl_s": 1.0}}},
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{receiving.http.port}/v1/logs"  # type: ignore[union-attr]
    with fake_openai(SCRIPT) as fake:
        judging = start_sidecar(
            extra_detectors=[roots],
            detectors={"evaluations": {"emit": {"endpoint": endpoint}},
                       "faithfulness": settings(fake.endpoint)},
        )  # fmt: skip
        up = {"detector": "faithfulness"}
        wait_until(lambda: sample(judging.registry, "rag_monitor_detector_up", **up) == 1)
        http = f"http://127.0.0.1:{judging.http.port}"  # type: ignore[union-attr]
        provider, tracer = tracer_for(HttpSpans(endpoint=f"{http}/v1/traces"))
        start = time.time_ns()
        trace_ids = {
            name: emit_rag_request(tracer, RagRequest(
                start + i, extra=extra, documents=() if name == "no_context" else (
                    ("d1", "acme"), ("d2", "acme"))))
            for i, (name, extra) in enumerate(REQUESTS.items())
        }  # fmt: skip
        provider.shutdown()
        wait_until(lambda: len(roots.by_trace) == len(REQUESTS))
        # a score of a request this sidecar never saw (another replica's, judge_location:
        # kafka) is not sent; it is processed before the labels, so it would come first
        elsewhere = JudgeScore("f" * 32, 0.9, 0.5)
        assert judging.pipeline.submit(Events((elsewhere,), "internal"), timeout=5)
        labels = [{"trace_id": trace_ids[name], "gold_doc_ids": gold}
                  for name, gold in LABELS.items()]  # fmt: skip
        assert post(judging, "/v1/labels", orjson.dumps(labels), "application/json")[0] == 200
        wait_until(lambda: len(recorder.results) >= len(EXPECTED), 30)
    names = {trace_id: name for name, trace_id in trace_ids.items()}
    got = {(names[str(r.trace_id)], r.name): r for r in recorder.results}
    assert len(recorder.results) == len(EXPECTED)
    assert {key: (r.score, r.label, r.error_type) for key, r in got.items()} == EXPECTED
    for (name, _), result in got.items():
        assert result.span_id is not None
        assert result.span_id == roots.by_trace[trace_ids[name]], name
    counts = {
        (evaluation, outcome): sample(receiving.registry, RESULTS_TOTAL, evaluation=evaluation,
                                      outcome=outcome, variant="production")
        for evaluation in ("faithfulness", "retrieval_false_exclusion")
        for outcome in ("pass", "fail", "error")
    }  # fmt: skip
    assert counts == {
        ("faithfulness", "pass"): 1, ("faithfulness", "fail"): 0, ("faithfulness", "error"): 3,
        ("retrieval_false_exclusion", "pass"): 1, ("retrieval_false_exclusion", "fail"): 1,
        ("retrieval_false_exclusion", "error"): 0,
    }  # fmt: skip
