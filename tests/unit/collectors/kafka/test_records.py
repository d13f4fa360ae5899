"""rag-trace/1 records, labels and feedback: parsed into trusted values or refused with a reason."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from collectors.kafka.records import parse_rag_trace
from monitor.contract.events import InvalidRecord, parse_feedback, parse_labels
from monitor.contract.trace import Feedback, Label

EXAMPLE = (Path(__file__).resolve().parents[3] / "testdata" / "rag_trace_example.json").read_bytes()


def test_design_example_parses_into_every_field() -> None:
    """The README's rag-trace/1 example record fills every RagTrace field, context tenant from metadata."""
    trace = parse_rag_trace(EXAMPLE, "kafka")
    assert trace.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert trace.time.isoformat() == "2026-12-02T14:00:00+00:00"
    assert (trace.tenant, trace.intent, trace.probe_id) == ("acme", "billing", "q17")
    assert trace.contexts[0].doc_id == "d2"
    assert trace.contexts[0].tenant == "acme"
    assert trace.contexts[0].chunk_id == "d2#3"
    assert trace.retrieved == ("d2", "d7")
    assert trace.relevance_excluded == ("d5",)
    assert trace.entitlement_excluded == ("d3",)
    assert trace.stages["total"] == 1.1
    assert trace.stages["ttft"] == 0.3
    assert trace.usage[0].model == "gpt-4o"
    assert trace.usage[0].prompt_tokens == 900
    assert trace.cost_usd == 0.0035
    assert trace.query_embedding == (0.1, -0.2)
    assert trace.source == "kafka"


def test_only_trace_id_is_required() -> None:
    """A minimal record has defaults for everything but the id."""
    trace = parse_rag_trace(b'{"schema": "rag-trace/1", "trace_id": "ab"}', "otlp")
    assert trace.stages == {}
    assert trace.contexts == ()


def test_release_attributes_are_read_from_the_record() -> None:
    """service_name, service_version and deployment_environment are optional record fields."""
    trace = parse_rag_trace(
        _with(service_name="rag-api", service_version="2.3.1", deployment_environment="prod"),
        "kafka",
    )
    assert (trace.service_name, trace.service_version, trace.deployment_environment) == (
        "rag-api",
        "2.3.1",
        "prod",
    )
    assert parse_rag_trace(EXAMPLE, "kafka").service_version is None


def _with(**changes: object) -> bytes:
    record = orjson.loads(EXAMPLE)
    record.update(changes)
    return orjson.dumps(record)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "invalid JSON"),
        (b"\xff\xfe{}", "invalid JSON"),
        (b"[]", "record: Input should be"),
        (_with(schema="rag-trace/2"), "schema"),
        (_with(trace_id=""), "trace_id"),
        (_with(trace_id="not-hex"), "trace_id"),
        (_with(stages={"total": "slow"}), "stages.total"),
        (_with(stages={"total": -1}), "stages.total"),
        (_with(stages={"lunch": 1}), "stages"),
        (b'{"schema": "rag-trace/1", "trace_id": "ab", "stages": {"total": NaN}}', "invalid JSON"),
        (_with(stages={"total": 1e400}), "stages.total"),
        (_with(retrieved="d1"), "retrieved"),
        (_with(retrieved=[f"d{i}" for i in range(10_000)]), "retrieved"),
        (_with(contexts=[{"text": "no id"}]), "contexts.0.doc_id"),
        (_with(usage=[{"model": "m", "prompt_tokens": -5}]), "usage.0.prompt_tokens"),
        (_with(query_embedding=[]), "query_embedding"),
        (_with(service_version="v" * 129), "service_version"),
        (_with(service_name=""), "service_name"),
        (_with(deployment_environment=3), "deployment_environment"),
    ],
    ids=[
        "garbage", "utf16-bom", "not-object", "wrong-schema", "empty-id", "non-hex-id",
        "stage-type", "negative-stage", "unknown-stage", "nan", "infinite", "list-type",
        "10k-documents", "context-without-id", "negative-tokens", "empty-embedding",
        "long-version", "empty-service", "environment-type",
    ],
)  # fmt: skip
def test_invalid_records_are_refused_with_the_field(body: bytes, reason: str) -> None:
    """Each malformed record raises InvalidRecord naming what is wrong."""
    with pytest.raises(InvalidRecord, match=reason.replace(".", r"\.")):
        parse_rag_trace(body, "kafka")


def test_labels_accept_an_object_or_a_list() -> None:
    """Labels come keyed by trace_id or probe_id, one or many per body."""
    assert parse_labels(b'{"probe_id": "q17", "gold_doc_ids": ["d2"]}') == [
        Label(("d2",), probe_id="q17")
    ]
    many = parse_labels(
        b'[{"trace_id": "ab", "gold_doc_ids": ["d1", "d2"]}, {"probe_id": "q1", "gold_doc_ids": ["d3"]}]'
    )
    assert [label.trace_id for label in many] == ["ab", None]


@pytest.mark.parametrize(
    "body",
    [
        b'{"gold_doc_ids": ["d1"]}',
        b'{"trace_id": "a", "probe_id": "b", "gold_doc_ids": ["d1"]}',
        b'{"trace_id": "a", "gold_doc_ids": []}',
        b'{"trace_id": "a", "gold_doc_ids": "d1"}',
        b"[]",
    ],
    ids=["no-key", "both-keys", "no-gold", "gold-not-list", "empty-list"],
)
def test_malformed_labels_are_refused(body: bytes) -> None:
    """A label needs exactly one key and a non-empty list of gold documents."""
    with pytest.raises(InvalidRecord):
        parse_labels(body)


def test_feedback_kinds_are_checked() -> None:
    """Feedback needs a trace id and a known kind (every kind: tests/unit/detectors/feedback/test_feedback_kinds.py)."""
    assert parse_feedback(b'{"trace_id": "ab", "kind": "regenerate"}') == [
        Feedback("ab", "regenerate")
    ]
    with pytest.raises(InvalidRecord, match="kind"):
        parse_feedback(b'{"trace_id": "ab", "kind": "meh"}')


def test_fields_the_collector_owns_are_not_taken_from_the_record() -> None:
    """source, root_span_id and a context's tenant come from the collector and metadata, not JSON."""
    body = _with(
        source="phoenix",
        root_span_id=5,
        contexts=[{"doc_id": "d2", "tenant": 7, "metadata": {"tenant": "acme"}}, {"doc_id": "d9"}],
    )
    trace = parse_rag_trace(body, "otlp")
    assert (trace.source, trace.root_span_id) == ("otlp", None)
    assert [c.tenant for c in trace.contexts] == ["acme", None]


def test_ids_are_lowercased_and_a_naive_time_is_utc() -> None:
    """An upper-case hex trace id is stored lower-case; a time without zone is read as UTC."""
    trace = parse_rag_trace(_with(trace_id="4BF92F35", time="2026-12-02T14:00:00"), "kafka")
    assert trace.trace_id == "4bf92f35"
    assert trace.time.isoformat() == "2026-12-02T14:00:00+00:00"


def test_every_error_is_counted_after_the_first() -> None:
    """The reason names the first bad field (the schema first) and counts the others."""
    with pytest.raises(InvalidRecord) as caught:
        parse_rag_trace(_with(schema="rag-trace/2", trace_id="", retrieved="d1"), "kafka")
    assert str(caught.value) == "schema: Input should be 'rag-trace/1' (+2 more)"
