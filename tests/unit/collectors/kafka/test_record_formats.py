"""Kafka records: telling the payload format by the first bytes, and decoding trace records
and logs records (gen_ai.evaluation.result records as evaluation events)."""

from __future__ import annotations

import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from collectors.kafka.records import decode_logs_record, decode_trace_record, sniff_format
from collectors.names import LOG_RECORDS_TOTAL
from collectors.otlp.export_decoding import Empty, Invalid, Refusal
from monitor.contract.names import REJECTED_SPANS_TOTAL
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import EvaluationResult
from monitor.contract.work_items import SpanBatch, WholeTrace
from tests.conftest import sample
from tests.unit.collectors.otlp.test_logs import SPAN, logs_request

TRACE_ID = bytes.fromhex("0af7651916cd43dd8448eb211c80319c")


def _otlp_proto(spans: int = 1) -> bytes:
    request = ExportTraceServiceRequest()
    scope = request.resource_spans.add().scope_spans.add()
    for number in range(spans):
        span = scope.spans.add(
            trace_id=TRACE_ID,
            span_id=(number + 1).to_bytes(8, "big"),
            name="s",
            start_time_unix_nano=1,
            end_time_unix_nano=2,
        )
        span.attributes.add(key="openinference.span.kind").value.string_value = "CHAIN"
    return request.SerializeToString()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b'{"schema": "rag-trace/1", "trace_id": "t"}', "rag_trace_json"),
        (b' \t\r\n{"schema": "rag-trace/1"}', "rag_trace_json"),
        (b'{"resourceSpans": []}', "otlp_json"),
        (b"{broken", "otlp_json"),
        (b"\n{broken", "otlp_proto"),  # field 1, length 123: a protobuf message
        (b"\x0b\x0c{}", "otlp_proto"),  # whitespace to bytes.lstrip, not to JSON
        (b"", "otlp_proto"),
        (b"   ", "otlp_proto"),
    ],
    ids=["rag-trace", "rag-trace-after-whitespace", "otlp-json", "broken-json", "proto-brace",
         "non-json-whitespace", "empty", "only-whitespace"],
)  # fmt: skip
def test_format_is_told_by_the_first_byte_after_whitespace(value: bytes, expected: str) -> None:
    """JSON starts with "{" after whitespace; anything else is OTLP protobuf."""
    assert sniff_format(value) == expected


def test_a_large_protobuf_record_is_sniffed_and_decoded() -> None:
    """A record of many spans (whose first byte is a newline) decodes to one span batch."""
    value = _otlp_proto(spans=300)
    assert sniff_format(value) == "otlp_proto"
    metrics = PipelineMetrics(SidecarRegistry())
    item = decode_trace_record(value, "auto", metrics)
    assert isinstance(item, SpanBatch)
    assert (len(item.spans), item.ticket) == (300, None)
    assert sample(metrics.registry, REJECTED_SPANS_TOTAL, collector="kafka") == 0


def test_a_rag_trace_record_decodes_to_a_whole_trace() -> None:
    """auto: a rag-trace/1 record becomes one WholeTrace from Kafka."""
    metrics = PipelineMetrics(SidecarRegistry())
    item = decode_trace_record(b'{"schema": "rag-trace/1", "trace_id": "ab12"}', "auto", metrics)
    assert isinstance(item, WholeTrace)
    assert (item.trace.trace_id, item.trace.source) == ("ab12", "kafka")


def test_a_broken_rag_trace_record_is_invalid() -> None:
    """A rag-trace/1 record that fails validation is refused as invalid, its reason kept."""
    with pytest.raises(Invalid, match="trace_id"):
        decode_trace_record(
            b'{"schema": "rag-trace/1", "trace_id": 7}',
            "auto",
            PipelineMetrics(SidecarRegistry()),
        )


def test_a_record_whose_spans_are_all_refused_is_invalid() -> None:
    """Every span refused: the record as a whole is invalid (it is dead-lettered), and its
    spans are counted as rejected, as the receivers count them."""
    request = ExportTraceServiceRequest.FromString(_otlp_proto())
    request.resource_spans[0].scope_spans[0].spans[0].start_time_unix_nano = 0
    metrics = PipelineMetrics(SidecarRegistry())
    with pytest.raises(Invalid, match="every span was rejected"):
        decode_trace_record(request.SerializeToString(), "otlp_proto", metrics)
    assert sample(metrics.registry, REJECTED_SPANS_TOTAL, collector="kafka") == 1


# --- logs records -------------------------------------------------------------------------

EVALUATION = {"eventName": "gen_ai.evaluation.result", "traceId": TRACE_ID.hex(),
              "attributes": [{"key": "gen_ai.evaluation.name",
                              "value": {"stringValue": "hallucination"}}]}  # fmt: skip


def _json_logs(*records: object) -> bytes:
    return orjson.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": list(records)}]}]})


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_a_logs_record_becomes_evaluation_events_in_either_encoding(encoding: str) -> None:
    """Protobuf or OTLP/JSON, told apart per record: the evaluation records are events from
    Kafka; the plain line is counted as ignored, the bad trace id as rejected."""
    registry = SidecarRegistry()
    if encoding == "otlp_proto":
        value = logs_request()
    else:
        value = _json_logs({**EVALUATION, "spanId": SPAN.hex()}, {"body": {"stringValue": "x"}},
                           {**EVALUATION, "traceId": "xyz"})  # fmt: skip
    item = decode_logs_record(value, PipelineMetrics(registry))
    assert (item.collector, item.ticket) == ("kafka", None)
    assert all(isinstance(e, EvaluationResult) and e.trace_id == TRACE_ID.hex()
               for e in item.events)  # fmt: skip
    evaluations = len(item.events)
    assert evaluations == (2 if encoding == "otlp_proto" else 1)
    for kind, expected in (("evaluation", evaluations), ("ignored", 1), ("rejected", 1)):
        assert sample(registry, LOG_RECORDS_TOTAL, collector="kafka", kind=kind) == expected


def test_a_logs_record_of_other_log_lines_is_kept_without_events() -> None:
    """A record of plain log lines is valid (its offset is committed): no event, all ignored."""
    registry = SidecarRegistry()
    value = _json_logs({"body": {"stringValue": "GET /health 200"}})
    item = decode_logs_record(value, PipelineMetrics(registry))
    assert list(item.events) == []
    assert sample(registry, LOG_RECORDS_TOTAL, collector="kafka", kind="ignored") == 1


@pytest.mark.parametrize(
    ("value", "error", "reason"),
    [
        (_json_logs({**EVALUATION, "traceId": "xyz"}), Invalid, "every log record was rejected"),
        (_json_logs(), Empty, "no log records"),
        (b'{"schema": "rag-trace/1", "trace_id": "ab"}', Empty, "no log records"),
        (b"", Empty, "no log records"),
        (b"{broken", Invalid, "invalid JSON"),
        (b"\xff\x00", Invalid, "undecodable protobuf"),
    ],
    ids=["every-record-rejected", "no-records", "a-rag-trace-record", "empty", "broken-json",
         "not-protobuf"],
)  # fmt: skip
def test_a_logs_record_without_a_record_kept_is_refused(
    value: bytes, error: type[Refusal], reason: str
) -> None:
    """Nothing kept, or nothing decodable: the record is refused with a reason (dead-lettered)."""
    with pytest.raises(error, match=reason):
        decode_logs_record(value, PipelineMetrics(SidecarRegistry()))
