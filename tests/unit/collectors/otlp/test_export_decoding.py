"""The intake step the OTLP receivers and the Kafka collector share: each kind of export
becomes a work item or one typed refusal, and refused spans are counted either way."""

from __future__ import annotations

import orjson
import pytest

from collectors.otlp import export_decoding
from collectors.otlp.export_decoding import Empty, Invalid, RetryLater
from monitor.contract.events import parse_labels
from monitor.contract.names import REJECTED_SPANS_TOTAL
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.work_items import Events, SpanBatch
from tests.conftest import sample
from tests.unit.collectors.otlp.test_http import SinkConsumer, export_request

TRACE = "0af7651916cd43dd8448eb211c80319c"


def _json_spans(*start_times: int) -> bytes:
    spans = [
        {"traceId": TRACE, "spanId": f"{number + 1:016x}", "name": "s",
         "startTimeUnixNano": str(start), "endTimeUnixNano": str(max(start, 2))}
        for number, start in enumerate(start_times)
    ]  # fmt: skip
    return orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": spans}]}]})


@pytest.mark.parametrize(
    ("body", "is_json", "outcome", "rejected"),
    [
        (export_request([b"\x01" * 8, b"\x02" * 8]), False, 2, 0),
        (export_request([b"\x01" * 8], bad_span=True), False, 1, 1),
        (_json_spans(1, 0), True, 1, 1),
        (_json_spans(0, 0), True, Invalid, 2),
        (b"", False, Empty, 0),
        (b'{"resourceSpans": []}', True, Empty, 0),
        (b"\xff\x00", False, Invalid, 0),
        (b"{broken", True, Invalid, 0),
    ],
    ids=["valid", "some-refused", "json-some-refused", "every-span-refused", "empty-protobuf",
         "empty-json", "undecodable", "broken-json"],
)  # fmt: skip
def test_a_trace_export_is_a_batch_or_one_refusal(
    body: bytes, is_json: bool, outcome: int | type[export_decoding.Refusal], rejected: int
) -> None:
    """Some valid spans: a batch of them; every span refused or undecodable: Invalid;
    nothing in it: Empty. Refused spans are counted whatever the outcome."""
    metrics = PipelineMetrics(SidecarRegistry())
    if isinstance(outcome, int):
        batch, decoded = export_decoding.spans(body, is_json, "kafka", metrics)
        assert isinstance(batch, SpanBatch)
        assert (len(batch.spans), batch.collector, decoded.rejected) == (outcome, "kafka", rejected)
    else:
        with pytest.raises(outcome):
            export_decoding.spans(body, is_json, "kafka", metrics)
    assert sample(metrics.registry, REJECTED_SPANS_TOTAL, collector="kafka") == rejected


def test_a_labels_body_is_events_or_invalid() -> None:
    """A labels body becomes its events; one that does not validate is Invalid."""
    body = orjson.dumps([{"trace_id": TRACE, "gold_doc_ids": ["d1"]}, {"probe_id": "p1",
                         "gold_doc_ids": ["d2"]}])  # fmt: skip
    item = export_decoding.events(body, parse_labels, "otlp")
    assert (len(item.events), item.collector) == (2, "otlp")
    with pytest.raises(Invalid):
        export_decoding.events(b'{"gold_doc_ids": ["d1"]}', parse_labels, "otlp")


def test_submit_queues_counts_an_empty_item_and_says_retry_when_full() -> None:
    """An item is queued; one with no events is counted ok without the queue; a full queue
    is RetryLater."""
    sink = SinkConsumer(SidecarRegistry())
    batch, _ = export_decoding.spans(export_request([b"\x01" * 8]), False, "otlp", sink.metrics)
    export_decoding.submit(sink, batch, 0.0)
    export_decoding.submit(sink, Events((), "otlp"), 0.0)
    assert sink.items == [batch]
    assert sample(sink.metrics.registry, "rag_monitor_records_total",
                  collector="otlp", outcome="ok") == 1  # fmt: skip
    sink.accept = False
    with pytest.raises(RetryLater, match="retry later"):
        export_decoding.submit(sink, batch, 0.0)
