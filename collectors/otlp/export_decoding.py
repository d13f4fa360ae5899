"""The intake step, one per signal, that the OTLP receivers and the Kafka collector share:
an export's bytes (a request body, a gRPC message, a Kafka record) become a work item or
a typed refusal. Each transport only says the outcome in its own terms:

| outcome      | OTLP/HTTP          | OTLP/gRPC          | Kafka                      |
|--------------|--------------------|--------------------|----------------------------|
| work item    | 200 (partial)      | OK (partial)       | queued with its ticket     |
| ``Invalid``  | 400                | INVALID_ARGUMENT   | dead letter                |
| ``Empty``    | 200                | OK                 | dead letter (no spans)     |
| ``RetryLater``| 503, Retry-After  | UNAVAILABLE        | waits, committing meanwhile |

Spans and log records refused by validation are counted here, whatever becomes of the
rest: a request or record with some valid is kept, like an OTLP partial success.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from google.protobuf.message import Message

from collectors.otlp.decode import DecodedSpans, PayloadError, decode_otlp_json, decode_otlp_proto
from collectors.otlp.logs import DecodedLogs, decode_logs_json, decode_logs_proto
from monitor.contract.events import InvalidRecord
from monitor.contract.pipeline_metrics import Origin, PipelineMetrics
from monitor.contract.trace import Event, Source
from monitor.contract.work_items import Consumer, Events, SpanBatch


class Refusal(Exception):
    """Why an export makes no work item; the message is safe to tell its sender."""


class Invalid(Refusal):
    """Nothing in it can be used: undecodable, or every span, log record or event refused."""


class Empty(Refusal):
    """Valid, and holding nothing: an export without spans or log records."""


class RetryLater(Refusal):
    """The pipeline's queue stayed full: the sender should try again."""


class Decoded(Protocol):
    """What decoding found, for the answer: the OTLP partial-success response."""

    def json_response(self) -> bytes: ...
    def export_response(self) -> Message: ...


# An intake step of an OTLP signal (``spans``, ``evaluation_results``), for the receivers
# that answer every signal the same way.
Signal = Callable[[bytes, bool, Source, PipelineMetrics], tuple[SpanBatch | Events, Decoded]]


def spans(
    body: bytes, is_json: bool, collector: Source, metrics: PipelineMetrics
) -> tuple[SpanBatch, DecodedSpans]:
    """An OTLP trace export as a batch of its valid spans (and what decoding found, for the
    partial-success answer)."""
    try:
        decoded = decode_otlp_json(body) if is_json else decode_otlp_proto(body)
    except PayloadError as exc:
        raise Invalid(str(exc)) from exc
    if decoded.rejected:
        metrics.rejected_spans.labels(collector).inc(decoded.rejected)
    if decoded.spans:
        return SpanBatch(decoded.spans, collector), decoded
    if decoded.rejected:
        raise Invalid(f"every span was rejected: {decoded.first_error}")
    raise Empty("no spans")


def evaluation_results(
    body: bytes, is_json: bool, collector: Origin, metrics: PipelineMetrics
) -> tuple[Events, DecodedLogs]:
    """An OTLP logs export as its evaluation results, its log records counted by kind. One
    whose records are all of other kinds is kept with no events: it is valid, and a Kafka
    record's offset is released through the pipeline like any other."""
    try:
        decoded = decode_logs_json(body) if is_json else decode_logs_proto(body)
    except PayloadError as exc:
        raise Invalid(str(exc)) from exc
    decoded.count(metrics.registry, collector)
    if decoded.results or decoded.ignored:
        return Events(decoded.results, collector), decoded
    if decoded.rejected:
        raise Invalid(f"every log record was rejected: {decoded.first_error}")
    raise Empty("no log records")


def events(body: bytes, parse: Callable[[bytes], Sequence[Event]], collector: Origin) -> Events:
    """A labels or feedback body (``parse_labels``, ``parse_feedback``) as its events."""
    try:
        return Events(parse(body), collector)
    except InvalidRecord as exc:
        raise Invalid(str(exc)) from exc


def submit(pipeline: Consumer, item: SpanBatch | Events, timeout_s: float) -> None:
    """Queue a receiver's item, waiting up to ``timeout_s`` for room, else ``RetryLater``.
    An item with nothing to do (a logs export of other records only) is counted at once:
    no ticket waits on it."""
    if isinstance(item, Events) and not item.events:
        pipeline.metrics.count_record(item.collector, "ok")
    elif not pipeline.submit(item, timeout=timeout_s):
        raise RetryLater("pipeline queue is full, retry later")
