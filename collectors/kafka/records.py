"""The Kafka collector's record formats: a trace record is OTLP (protobuf or JSON, told
apart per record with ``auto``) or JSON ``rag-trace/1``; a logs record is an OTLP logs
export (labels and feedback: ``monitor/contract/events.py``). OTLP records go through the intake
step the receivers share (``collectors/otlp/export_decoding.py``).

Parsed with pydantic (a ``rag-trace/1`` record through a ``TypeAdapter`` over
the ``RagTrace`` dataclass, whose fields declare the bounds), forbidding
non-finite numbers and bounding every list, so a record either becomes a
trusted value or an ``InvalidRecord`` whose message names the offending field
(it goes into the dead-letter header).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, Literal

import orjson
from pydantic import Field, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from collectors.kafka.config import PayloadFormat
from collectors.otlp import export_decoding
from monitor.contract.events import InvalidRecord, Record, load_json, validation_reason
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.trace import RagTrace, Source
from monitor.contract.work_items import Events, WholeTrace, WorkItem

# Set by the collector, not by the record: a record's own value is ignored.
_NOT_FROM_RECORDS = frozenset({"source", "root_span_id"})
_RAG_TRACE = TypeAdapter(RagTrace)
# bytes.lstrip's whitespace, then one byte.
_FIRST_BYTE = re.compile(rb"[ \t\n\r\x0b\x0c]*(.)", re.DOTALL)


def decode_trace_record(
    value: bytes, payload_format: PayloadFormat, metrics: PipelineMetrics
) -> WorkItem:
    """One trace-topic record as a work item (without its ticket), or an
    ``export_decoding.Refusal``: a record whose spans were all refused, or that holds none,
    is dead-lettered; one with some valid spans is kept, like an OTLP partial success."""
    if payload_format == "auto":
        payload_format = sniff_format(value)
    if payload_format == "rag_trace_json":
        try:
            return WholeTrace(parse_rag_trace(value, "kafka"))
        except InvalidRecord as exc:
            raise export_decoding.Invalid(str(exc)) from exc
    batch, _ = export_decoding.spans(value, payload_format == "otlp_json", "kafka", metrics)
    return batch


def decode_logs_record(value: bytes, metrics: PipelineMetrics) -> Events:
    """One logs-topic record (an ``ExportLogsServiceRequest``) as its evaluation events
    (without its ticket), its log records counted by kind.

    The encoding is told per record, as ``auto`` does for traces: the Collector's exporter
    sets it per signal."""
    is_json = sniff_format(value) != "otlp_proto"
    results, _ = export_decoding.evaluation_results(value, is_json, "kafka", metrics)
    return results


def sniff_format(value: bytes) -> PayloadFormat:
    """Tell JSON (``rag-trace/1`` or OTLP/JSON) from OTLP protobuf by the first bytes."""
    # The first byte after ASCII whitespace, found without copying the record (lstrip would).
    first = _FIRST_BYTE.match(value)
    if first is None or first[1] != b"{":
        return "otlp_proto"
    try:
        document = orjson.loads(value)
    except orjson.JSONDecodeError:
        # A protobuf message may begin with "\n{" (field 1, length 123); one that
        # begins with "{" itself is broken JSON, and its dead-letter reason says so.
        return "otlp_json" if value[:1] == b"{" else "otlp_proto"
    if is_rag_trace_json(document):
        return "rag_trace_json"
    return "otlp_json"


class _RagTraceRecord(Record):
    """The record's envelope; ``RagTrace`` itself validates the rest."""

    schema_: Literal["rag-trace/1"] = Field(alias="schema")


def _errors(validate: Callable[[object], object], value: Any) -> list[ErrorDetails]:
    try:
        validate(value)
    except ValidationError as exc:
        return exc.errors()
    return []


def is_rag_trace_json(document: Any) -> bool:
    return isinstance(document, dict) and document.get("schema") == "rag-trace/1"


def parse_rag_trace(body: bytes, source: Source) -> RagTrace:
    """Parse one ``rag-trace/1`` record."""
    return rag_trace_from_document(load_json(body), source)


def rag_trace_from_document(document: Any, source: Source) -> RagTrace:
    """Validate one decoded ``rag-trace/1`` document into a ``RagTrace`` from ``source``."""
    errors = _errors(_RagTraceRecord.model_validate, document)
    if not isinstance(document, dict):
        raise InvalidRecord(validation_reason(errors))
    fields = {k: v for k, v in document.items() if k not in _NOT_FROM_RECORDS}
    fields["source"] = source
    if fields.get("time") is None:
        fields["time"] = datetime.now(UTC)
    contexts = fields.get("contexts")
    if isinstance(contexts, list):  # a context's tenant comes from its metadata only
        fields["contexts"] = [_without_tenant(c) for c in contexts]
    try:
        trace = _RAG_TRACE.validate_python(fields)
    except ValidationError as exc:
        raise InvalidRecord(validation_reason(errors + exc.errors())) from exc
    if errors:
        raise InvalidRecord(validation_reason(errors))
    return replace(
        trace, contexts=tuple(replace(c, tenant=_tenant_of(c.metadata)) for c in trace.contexts)
    )


def _without_tenant(context: Any) -> Any:
    if isinstance(context, dict):
        return {k: v for k, v in context.items() if k != "tenant"}
    return context


def _tenant_of(metadata: Mapping[str, Any]) -> str | None:
    tenant = metadata.get("tenant")
    return tenant if isinstance(tenant, str) else None
