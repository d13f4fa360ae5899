"""OTLP logs (``ExportLogsServiceRequest``, protobuf or JSON) as evaluation events.

A log record whose event name is ``gen_ai.evaluation.result`` (the record's
``event_name`` field, or the attribute ``event.name`` that older producers set) becomes
an ``EvaluationResult`` event naming its request by the record's trace id (and
``gen_ai.response.id`` when given); the detector joins it to the request's variant.
Other log records are counted and ignored: the sidecar is no log store. A record with
a malformed trace or span id is rejected (``partial_success.rejected_log_records``),
the others of the request kept, as the traces receiver does with spans.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsPartialSuccess,
    ExportLogsServiceRequest,
    ExportLogsServiceResponse,
)
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from prometheus_client import Counter

from collectors.names import LOG_RECORDS_TOTAL
from collectors.otlp.decode import (
    SpanRejected,
    _json_attributes,
    _json_id,
    _json_list,
    _proto_attributes,
    _proto_id,
    parse_json_object,
    parse_proto,
)
from collectors.spans.evaluations import EVALUATION_EVENT, genai_result
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import EvaluationResult


def log_records_counter(registry: SidecarRegistry) -> Counter:
    """The sidecar's log-record counter, shared by the HTTP and gRPC receivers: log records
    received by collector and kind: evaluation (became an event), ignored (another event or a
    plain log line), rejected (a malformed id)."""
    return registry.family(
        Counter,
        LOG_RECORDS_TOTAL,
        "OTLP log records by collector and kind: evaluation (gen_ai.evaluation.result, "
        "became an event), ignored (any other record), rejected (a malformed id).",
        ["collector", "kind"],
    )


@dataclass
class DecodedLogs:
    """What a logs export held: its evaluation results, the other records, the rejected."""

    results: list[EvaluationResult] = field(default_factory=list)
    ignored: int = 0
    rejected: int = 0
    first_error: str = ""

    def reject(self, reason: str) -> None:
        self.rejected += 1
        self.first_error = self.first_error or reason

    def count(self, registry: SidecarRegistry, collector: str) -> None:
        counter = log_records_counter(registry)
        for kind, value in (("evaluation", len(self.results)), ("ignored", self.ignored),
                            ("rejected", self.rejected)):  # fmt: skip
            if value:
                counter.labels(collector, kind).inc(value)

    def export_response(self) -> ExportLogsServiceResponse:
        if not self.rejected:
            return ExportLogsServiceResponse()
        partial = ExportLogsPartialSuccess(
            rejected_log_records=self.rejected, error_message=self.first_error
        )
        return ExportLogsServiceResponse(partial_success=partial)

    def json_response(self) -> bytes:
        if not self.rejected:
            return b"{}"
        partial = {"rejectedLogRecords": str(self.rejected), "errorMessage": self.first_error}
        return orjson.dumps({"partialSuccess": partial})


def _is_evaluation(event_name: Any, attributes: dict[str, Any]) -> bool:
    return (event_name or attributes.get("event.name")) == EVALUATION_EVENT


def decode_logs_proto(body: bytes) -> DecodedLogs:
    """Decode an ``ExportLogsServiceRequest`` in protobuf encoding."""
    return logs_from_request(parse_proto(ExportLogsServiceRequest, body))


def logs_from_request(request: ExportLogsServiceRequest) -> DecodedLogs:
    """The evaluation results of an already parsed request."""
    decoded = DecodedLogs()
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                try:
                    _proto_record(record, decoded)
                except SpanRejected as exc:
                    decoded.reject(str(exc))
    return decoded


def _proto_record(record: LogRecord, decoded: DecodedLogs) -> None:
    attributes = _proto_attributes(record.attributes)
    if not _is_evaluation(record.event_name, attributes):
        decoded.ignored += 1
        return
    trace_id = _proto_id(record.trace_id, 16, "trace_id") if record.trace_id else None
    span_id = _proto_id(record.span_id, 8, "span_id") if record.span_id else None
    decoded.results.append(genai_result(attributes, trace_id, span_id))


def decode_logs_json(body: bytes) -> DecodedLogs:
    """Decode an OTLP/JSON ``ExportLogsServiceRequest`` (hex ids)."""
    document = parse_json_object(body)
    decoded = DecodedLogs()
    for resource_logs in _json_list(document, "resourceLogs", "resource_logs"):
        for scope_logs in _json_list(resource_logs, "scopeLogs", "scope_logs"):
            for record in _json_list(scope_logs, "logRecords", "log_records"):
                try:
                    _json_record(record, decoded)
                except SpanRejected as exc:
                    decoded.reject(str(exc))
                except (TypeError, ValueError, KeyError, AttributeError) as exc:
                    decoded.reject(f"malformed log record: {type(exc).__name__}")
    return decoded


def _json_record(record: dict[str, Any], decoded: DecodedLogs) -> None:
    attributes = _json_attributes(record.get("attributes", []))
    if not _is_evaluation(record.get("eventName", record.get("event_name")), attributes):
        decoded.ignored += 1
        return
    raw_trace = record.get("traceId", record.get("trace_id")) or None
    raw_span = record.get("spanId", record.get("span_id")) or None
    trace_id = _json_id(raw_trace, 16, "traceId") if raw_trace else None
    span_id = _json_id(raw_span, 8, "spanId") if raw_span else None
    decoded.results.append(genai_result(attributes, trace_id, span_id))
