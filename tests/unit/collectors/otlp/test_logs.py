"""OTLP logs on the OTLP/HTTP receiver: gen_ai.evaluation.result records become
evaluation events, other records are counted and ignored, bad ids are partial success."""

from __future__ import annotations

import json

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from collectors.names import LOG_RECORDS_TOTAL
from monitor.contract.trace import EvaluationResult
from monitor.contract.work_items import Events
from tests.conftest import sample
from tests.unit.collectors.otlp.test_http import TRACE, Running, post, receiver

__all__ = ["receiver"]  # the fixture, shared with the traces receiver's tests
SPAN = bytes.fromhex("00f067aa0ba902b7")


def _attribute(key: str, value: str | float) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=value))


def logs_request() -> bytes:
    """Two results (event_name, and the older event.name attribute), a plain log line,
    and a result whose trace id is three bytes long."""
    request = ExportLogsServiceRequest()
    records = request.resource_logs.add().scope_logs.add().log_records
    records.add(event_name="gen_ai.evaluation.result", trace_id=TRACE, span_id=SPAN, attributes=[
        _attribute("gen_ai.evaluation.name", "answer_relevancy"),
        _attribute("gen_ai.evaluation.score.value", 0.4),
    ])  # fmt: skip
    records.add(trace_id=TRACE, attributes=[
        _attribute("event.name", "gen_ai.evaluation.result"),
        _attribute("gen_ai.evaluation.name", "toxicity"), _attribute("error.type", "timeout"),
    ])  # fmt: skip
    records.add(body=AnyValue(string_value="GET /health 200"))
    records.add(event_name="gen_ai.evaluation.result", trace_id=b"\1\2\3")
    return bytes(request.SerializeToString())


def test_protobuf_logs_become_evaluation_events(receiver: Running) -> None:
    """Evaluation records are submitted as events with their ids; the plain line is
    counted as ignored, the bad id as rejected (partial success)."""
    service, sink, registry = receiver
    status, _, raw = post(service, "/v1/logs", logs_request(),
                          {"Content-Type": "application/x-protobuf"})  # fmt: skip
    assert status == 200
    response = ExportLogsServiceResponse.FromString(raw)
    assert response.partial_success.rejected_log_records == 1
    [events] = sink.items
    assert isinstance(events, Events)
    assert list(events.events) == [
        EvaluationResult("answer_relevancy", 0.4, trace_id=TRACE.hex(), span_id=SPAN.hex()),
        EvaluationResult("toxicity", error_type="timeout", trace_id=TRACE.hex()),
    ]
    for kind, expected in (("evaluation", 2), ("ignored", 1), ("rejected", 1)):
        assert sample(registry, LOG_RECORDS_TOTAL, collector="otlp", kind=kind) == expected


def test_json_logs_become_evaluation_events(receiver: Running) -> None:
    """The OTLP/JSON form: hex ids, eventName, attributes with typed values."""
    service, sink, _ = receiver
    body = {"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"eventName": "gen_ai.evaluation.result", "traceId": TRACE.hex(),
         "attributes": [
             {"key": "gen_ai.evaluation.name", "value": {"stringValue": "hallucination"}},
             {"key": "gen_ai.evaluation.score.label", "value": {"stringValue": "factual"}},
             {"key": "gen_ai.response.id", "value": {"stringValue": "chatcmpl-9"}}]},
        {"body": {"stringValue": "a log line"}},
    ]}]}]}  # fmt: skip
    status, _, raw = post(service, "/v1/logs", json.dumps(body).encode(),
                          {"Content-Type": "application/json"})  # fmt: skip
    assert (status, raw) == (200, b"{}")
    [events] = sink.items
    assert isinstance(events, Events)
    assert list(events.events) == [
        EvaluationResult("hallucination", label="factual", response_id="chatcmpl-9",
                         trace_id=TRACE.hex()),
    ]  # fmt: skip


def test_logs_with_every_record_rejected_or_undecodable_get_400(receiver: Running) -> None:
    """Only malformed records, or a body that is no logs request: 400, nothing submitted."""
    service, sink, registry = receiver
    bad = {"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"eventName": "gen_ai.evaluation.result", "traceId": "xyz"}]}]}]}  # fmt: skip
    assert post(service, "/v1/logs", json.dumps(bad).encode(),
                {"Content-Type": "application/json"})[0] == 400  # fmt: skip
    assert (
        post(service, "/v1/logs", b"\xff\x00", {"Content-Type": "application/x-protobuf"})[0] == 400
    )
    assert sink.items == []
    assert sample(registry, "rag_monitor_records_total", collector="otlp", outcome="invalid") == 2
