"""Field coverage: which fields each production request carries, per instrumentation, and
which fields the enabled detectors read (the RagTraceFieldMissing ticket's fields)."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest

from alerts.field_coverage import needed_fields
from collectors.spans.assembly import SpanAssembly
from collectors.spans.config import AssemblyConfig, MappingConfig
from collectors.spans.span import Span
from monitor.contract.components import load_components
from monitor.contract.config import Config
from monitor.contract.field_presence import (
    FIELDS,
    MAX_INSTRUMENTATIONS,
    MAX_TOOLS,
    PRESENT,
    FieldCoverage,
)
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Context, RagTrace, ToolCall, Usage
from monitor.contract.work_items import SpanBatch, WholeTrace
from monitor.runtime.config_loading import ConfigError, load_config
from monitor.runtime.pipeline import Pipeline
from tests.conftest import sample

T0 = datetime(2026, 12, 4, tzinfo=UTC)
KNOWN = "openinference.instrumentation.langchain"
FULL = RagTrace(
    trace_id="a1",
    time=T0,
    source="otlp",
    tenant="acme",
    query="How long do refunds take?",
    answer="Thirty days.",
    contexts=(Context(doc_id="d1", text="Refunds take thirty days."),),
    retrieved=("d1",),
    stages={"embed": 0.01, "retrieve": 0.1, "rerank": 0.05, "generate": 0.8, "ttft": 0.2,
            "total": 1.0},
    usage=(Usage("gpt-4o", prompt_tokens=900, completion_tokens=40),),
    query_embedding=(0.1, 0.2),
    instrumentation=KNOWN,
)  # fmt: skip
# What a retriever that returned nothing, from a tracer nobody named, leaves of a request.
BARE = RagTrace(
    trace_id="b2", time=T0, source="otlp", answer="I cannot say.", stages={"total": 0.4}
)


def counted(registry: SidecarRegistry, field: str, present: str, instrumentation: str) -> float:
    return sample(
        registry,
        "rag_trace_fields_total",
        field=field,
        present=present,
        instrumentation=instrumentation,
    )


def test_every_field_of_a_full_request_is_counted_present() -> None:
    """A request carrying every field counts present="true" once per field, none missing."""
    registry = SidecarRegistry()
    FieldCoverage(registry, [KNOWN]).observe(FULL)
    for field in FIELDS:
        assert counted(registry, field, "true", KNOWN) == 1, field
        assert counted(registry, field, "false", KNOWN) == 0, field


def test_a_request_without_documents_counts_each_missing_field() -> None:
    """A bare request counts query, contexts, ids, usage, vector, tenant and the stages as
    missing, its answer and itself as present; no scope name is the instrumentation none."""
    registry = SidecarRegistry()
    FieldCoverage(registry, [KNOWN]).observe(BARE)
    present = {field for field in FIELDS if counted(registry, field, "true", "none")}
    missing = {field for field in FIELDS if counted(registry, field, "false", "none")}
    assert present == {"request", "answer"}
    assert missing == set(FIELDS) - present


@pytest.mark.parametrize(
    ("contexts", "retrieved", "contexts_present", "ids_present", "derived"),
    [
        ((Context("d1", text=""),), ("d1",), False, True, 0),
        ((Context("sha256:ab12", text="evidence", id_derived=True),), ("sha256:ab12",), True,
         False, 1),
        ((Context("d1", text="a"), Context("sha256:cd", text="b", id_derived=True)),
         ("d1", "sha256:cd"), True, False, 1),
    ],
    ids=["context-without-text", "derived-id", "one-of-two-derived"],
)  # fmt: skip
def test_contexts_need_text_and_ids_must_not_be_derived(
    contexts: tuple[Context, ...],
    retrieved: tuple[str, ...],
    contexts_present: bool,
    ids_present: bool,
    derived: int,
) -> None:
    """Contexts count only with text; retrieved ids only when none was derived, and each
    derived id is counted."""
    registry = SidecarRegistry()
    trace = RagTrace("c3", T0, "otlp", contexts=contexts, retrieved=retrieved)
    FieldCoverage(registry, []).observe(trace)
    assert counted(registry, "contexts", str(contexts_present).lower(), "none") == 1
    assert counted(registry, "retrieved_ids", str(ids_present).lower(), "none") == 1
    assert sample(registry, "rag_trace_derived_document_ids_total", instrumentation="none") == (
        derived
    )


def test_instrumentations_outside_the_list_fold_into_other() -> None:
    """300 distinct scope names make one label value, other, beside the listed ones."""
    registry = SidecarRegistry()
    coverage = FieldCoverage(registry, [KNOWN])
    for n in range(300):
        coverage.observe(RagTrace(f"{n:x}", T0, "otlp", instrumentation=f"acme.tracer.{n}"))
    coverage.observe(FULL)
    labels = {
        s.labels["instrumentation"]
        for family in registry.collect()
        for s in family.samples
        if s.name == "rag_trace_fields_total"
    }
    assert labels == {"other", KNOWN}
    assert counted(registry, "request", "true", "other") == 300


def span(span_id: str, attributes: dict[str, Any], scope: str, parent: str | None = None) -> Span:
    return Span("ab".ljust(32, "0"), span_id.ljust(16, "0"), parent and parent.ljust(16, "0"),
                span_id, 1, 2, attributes, scope=scope)  # fmt: skip


def test_pipeline_counts_production_requests_and_unreadable_traces() -> None:
    """Through the pipeline: a trace that is no request counts request=false under its scope;
    a shadow twin is not counted; a production request is."""
    registry = SidecarRegistry()
    assembly = SpanAssembly(AssemblyConfig(grace_s=0.0), MappingConfig())
    pipeline = Pipeline(assembly, [], PipelineMetrics(registry, instrumentations=["acme.index"]))
    pipeline.start()
    pipeline.submit(SpanBatch([span("r", {"openinference.span.kind": "CHAIN"}, "acme.index")],
                              "otlp"))  # fmt: skip
    pipeline.submit(WholeTrace(RagTrace("d4", T0, "kafka", variant="shadow", answer="x")))
    pipeline.submit(WholeTrace(BARE))
    pipeline.shutdown()
    assert counted(registry, "request", "false", "acme.index") == 1
    assert sample(registry, "rag_trace_fields_total", field="request", present="true") == 1
    assert counted(registry, "answer", "true", "none") == 1  # BARE only, not the shadow twin


def test_the_fields_counted_are_the_ones_a_detector_may_name() -> None:
    """Every field a registered detector names is one field coverage counts."""
    config = load_config(None, {"RAG_MONITOR_DETECTORS__REVIEW__ENABLED": "true"})
    named = needed_fields(config, load_components())
    assert set(named) <= set(PRESENT)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, ["answer", "contexts", "query_vector", "retrieved_ids", "usage"]),
        ({"RAG_MONITOR_DETECTORS__FAITHFULNESS__ENABLED": "false",
          "RAG_MONITOR_DETECTORS__DRIFT__ENABLED": "false"}, ["retrieved_ids", "usage"]),
        ({"RAG_MONITOR_DETECTORS__REVIEW__ENABLED": "true",
          "RAG_MONITOR_GUARDRAILS__LATENCY_SLO": "{total: {}, retrieve: {threshold_s: 0.3}}"},
         ["answer", "contexts", "query", "query_vector", "retrieved_ids", "stage_retrieve",
          "usage"]),
    ],
    ids=["defaults", "faithfulness-and-drift-off", "review-and-a-retrieve-slo"],
)  # fmt: skip
def test_enabled_detectors_name_the_fields_the_ticket_watches(
    environ: dict[str, str], expected: list[str]
) -> None:
    """The ticket's fields follow the configuration: disabled detectors need nothing, a
    latency SLO on a stage needs that stage, the review queue needs query and answer."""
    assert needed_fields(load_config(None, environ), load_components()) == expected


@pytest.mark.parametrize("value", ["other", "none", "has space"], ids=["other", "none", "space"])
def test_instrumentation_allow_list_refuses_reserved_and_bad_values(value: str) -> None:
    """service.instrumentations refuses the fold words and values that are no label value."""
    with pytest.raises(ConfigError, match=r"service\.instrumentations"):
        load_config(None, {"RAG_MONITOR_SERVICE__INSTRUMENTATIONS": f"[{value!r}]"})


def test_default_config_lists_the_conformance_instrumentations() -> None:
    """The default allow-list holds the scope names of the instrumentations we test."""
    assert KNOWN in Config().service.instrumentations


def test_the_scopes_counted_as_other_are_named_up_to_the_bound() -> None:
    """Requests and unreadable traces of scopes outside the list are counted by scope name
    (the first MAX_INSTRUMENTATIONS names); later names and names that are no label value
    count as other; listed scopes are not counted there."""
    registry = SidecarRegistry()
    coverage = FieldCoverage(registry, [KNOWN])
    coverage.observe(RagTrace("e5", T0, "otlp", instrumentation="acme.tracer.0"))
    coverage.unreadable("acme.tracer.0")
    for n in range(1, MAX_INSTRUMENTATIONS + 10):
        coverage.observe(RagTrace(f"{n:x}", T0, "otlp", instrumentation=f"acme.tracer.{n}"))
    coverage.unreadable("acme tracer with spaces")
    coverage.observe(FULL)
    folded = {
        s.labels["scope"]: s.value
        for family in registry.collect()
        for s in family.samples
        if s.name == "rag_trace_other_instrumentations_total"
    }
    assert folded["acme.tracer.0"] == 2
    assert len(folded) == MAX_INSTRUMENTATIONS + 1
    assert folded["other"] == 10 + 1
    assert KNOWN not in folded


def test_retrieval_steps_are_a_histogram_and_tool_calls_are_counted_by_name() -> None:
    """An agent request of two retrievals and a weather lookup, a pipeline request of one
    retrieval, and a record that does not say: the histogram counts the first two, the
    tool counter each call under its name and whether it retrieved."""
    registry = SidecarRegistry()
    coverage = FieldCoverage(registry, [KNOWN])
    agent = dataclasses.replace(
        FULL,
        retrieval_calls=2,
        tool_calls=(
            ToolCall("search_docs", True, '{"query": "refunds"}', 3),
            ToolCall("get_weather", False, '{"city": "Paris"}'),
            ToolCall("search_docs", True, '{"query": "refund period"}', 2),
        ),
    )
    for trace in (agent, dataclasses.replace(FULL, retrieval_calls=1), FULL):
        coverage.observe(trace)
    bucket = "rag_trace_retrieval_calls_bucket"
    assert [sample(registry, bucket, instrumentation=KNOWN, le=le) for le in ("0", "1", "2")] == [
        0,
        1,
        2,
    ]
    assert sample(registry, "rag_trace_retrieval_calls_count", instrumentation=KNOWN) == 2
    assert sample(registry, "rag_trace_retrieval_calls_sum", instrumentation=KNOWN) == 3
    tools = "rag_trace_tool_calls_total"
    assert sample(registry, tools, tool="search_docs", retrieval="true") == 2
    assert sample(registry, tools, tool="get_weather", retrieval="false") == 1


def test_tool_names_are_counted_by_name_up_to_the_bound() -> None:
    """Past MAX_TOOLS names, and for a name that is no label value, the tool is other."""
    registry = SidecarRegistry()
    coverage = FieldCoverage(registry, [KNOWN])
    calls = (*(ToolCall(f"tool_{i}") for i in range(MAX_TOOLS + 2)), ToolCall("a b"))
    coverage.observe(dataclasses.replace(FULL, tool_calls=calls))
    tools = "rag_trace_tool_calls_total"
    assert sample(registry, tools, tool=f"tool_{MAX_TOOLS - 1}", retrieval="false") == 1
    assert sample(registry, tools, tool="other", retrieval="false") == 3
