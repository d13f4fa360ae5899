"""The mapping settings for instrumentations no convention covers: documents and usage
inside JSON values (``json_documents``, ``json_usage``), span kinds and the request span
by span name (``span_kind_names``, ``request_span_names``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from collectors.spans.config import MappingConfig
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span
from monitor.contract.trace import RagTrace, Usage
from tests.unit.collectors.spans.test_openinference import span

QUESTION = "When are invoices issued?"
ANSWER = "On the first day of each month."
ENTITY_IN, ENTITY_OUT = "traceloop.entity.input", "traceloop.entity.output"


def node(node_id: str, doc_id: str, text: str, score: float) -> str:
    """One retrieved node as dispatcher-style tracing writes it: JSON text in a JSON list."""
    return json.dumps({
        "node": {"id_": node_id, "metadata": {"doc_id": doc_id, "tenant": "acme"}, "text": text},
        "score": score,
    })  # fmt: skip


def dispatcher_spans() -> list[Span]:
    """A request traced one span per framework call, kinds only where a convention says:
    the workflow (CHAIN), a retriever's public method around its private one, and an LLM
    call whose raw response (JSON text inside the JSON output) holds the token counts."""
    raw = json.dumps(
        {"model": "gpt-4o-mini", "usage": {"prompt_tokens": 71, "completion_tokens": 9}}
    )
    return [
        span("wf", None, None, 1000, 2000, **{
            "traceloop.span.kind": "workflow",
            ENTITY_IN: json.dumps({"str_or_query_bundle": QUESTION}),
            ENTITY_OUT: json.dumps({"response": ANSWER}),
        }),
        span("outer", "wf", None, 1010, 1100, **{
            "traceloop.span.kind": "task",
            ENTITY_OUT: json.dumps([node("n1", "doc-4", "Invoices: first day.", 0.8)]),
        }),
        span("inner", "outer", None, 1020, 1090, **{
            "traceloop.span.kind": "task",
            ENTITY_OUT: json.dumps([
                node("n1", "doc-4", "Invoices: first day.", 0.8),
                node("n2", "doc-5", "Payment: fourteen days.", 0.5),
            ]),
        }),
        span("llm", "wf", None, 1200, 1900, **{
            "traceloop.span.kind": "task",
            ENTITY_OUT: json.dumps({"text": ANSWER, "raw": raw}),
        }),
    ]  # fmt: skip


def named(spans: list[Span], names: dict[str, str]) -> list[Span]:
    """The spans renamed (span id -> class-style name), as the instrumentation names them."""
    return [
        Span(s.trace_id, s.span_id, s.parent_span_id, names.get(s.name, s.name), s.start_ns,
             s.end_ns, s.attributes)
        for s in spans
    ]  # fmt: skip


SPANS = named(
    dispatcher_spans(),
    {"wf": "QueryEngine.workflow", "outer": "VectorIndexRetriever.task",
     "inner": "VectorIndexRetriever.task", "llm": "FakeLLM.task"},
)  # fmt: skip
ONBOARDED: dict[str, Any] = {
    "query_pointers": ["/str_or_query_bundle"],
    "span_kind_names": {r"^VectorIndexRetriever\.": "RETRIEVER", r"^FakeLLM\.": "LLM"},
    "json_documents": {
        "attribute": ENTITY_OUT, "text_pointer": "/node/text", "id_pointer": "/node/id_",
        "score_pointer": "/score", "metadata_pointer": "/node/metadata",
    },
    "json_usage": {
        "attribute": ENTITY_OUT,
        "input_tokens_pointer": "/raw/usage/prompt_tokens",
        "output_tokens_pointer": "/raw/usage/completion_tokens",
        "model_pointer": "/raw/model",
    },
}  # fmt: skip


def mapped(spans: list[Span], **mapping: Any) -> RagTrace:
    trace = TraceMapper(MappingConfig(**mapping)).build(spans, "otlp")
    assert trace is not None
    return trace


def test_without_the_settings_the_dispatcher_trace_is_no_request() -> None:
    """No span says LLM or RETRIEVER: out of the box the trace is not read as a request."""
    assert TraceMapper().build(SPANS, "otlp") is None


def test_documents_usage_and_stages_come_from_json_values_and_span_names() -> None:
    """Documents from JSON text inside a JSON list (text, own id as chunk, source id from
    the metadata, score), usage from JSON text inside the JSON output, retrieve and
    generate stages from the spans the names give a kind; the inner retriever call only."""
    trace = mapped(SPANS, **ONBOARDED)
    assert (trace.query, trace.answer) == (QUESTION, ANSWER)
    assert [(c.doc_id, c.chunk_id, c.text, c.score, c.tenant) for c in trace.contexts] == [
        ("doc-4", "n1", "Invoices: first day.", 0.8, "acme"),
        ("doc-5", "n2", "Payment: fourteen days.", 0.5, "acme"),
    ]
    assert trace.retrieved == ("doc-4", "doc-5")
    assert trace.usage == (Usage("gpt-4o-mini", None, prompt_tokens=71, completion_tokens=9),)
    assert trace.stages["retrieve"] == pytest.approx(0.07)  # the inner call's 70 ms
    assert trace.stages["generate"] == pytest.approx(0.7)


def test_the_span_attributes_win_over_json_usage() -> None:
    """A span whose conventions' attributes count tokens keeps them; the JSON is not read."""
    spans = [*SPANS[:-1], span("llm2", "wf", "LLM", 1200, 1900, **{
        "llm.model_name": "gpt-4o", "llm.token_count.prompt": 5, "llm.token_count.completion": 2,
        ENTITY_OUT: json.dumps({"raw": {"usage": {"prompt_tokens": 71, "completion_tokens": 9}}}),
    })]  # fmt: skip
    assert mapped(spans, **ONBOARDED).usage == (Usage("gpt-4o", None, 5, 2),)


def test_names_never_override_a_kind_a_convention_gives() -> None:
    """``span_kind_names`` applies to spans of no kind only."""
    mapper = TraceMapper(MappingConfig(span_kind_names={"^QueryEngine": "RETRIEVER"}))
    assert mapper.tree(SPANS).kinds["wf".ljust(16, "0")] == "CHAIN"


ROOT_ONLY = [
    span("root", None, None, 1000, 1500, **{
        ENTITY_IN: json.dumps({"inputs": {"request": {"question": QUESTION}}}),
        ENTITY_OUT: json.dumps({"outputs": {"final": {"answer": ANSWER}}}),
    }),
    span("step", "root", None, 1100, 1400, **{"traceloop.span.kind": "task"}),
]  # fmt: skip


def test_a_request_span_by_name_reads_a_trace_without_llm_or_retriever() -> None:
    """The root named by ``request_span_names`` with a query is a request: query, answer
    and total latency; without the name, or without a query, it is none."""
    settings = {"query_pointers": ["/request/question"], "answer_pointers": ["/final/answer"]}
    assert TraceMapper(MappingConfig(**settings)).build(ROOT_ONLY, "otlp") is None
    trace = mapped(ROOT_ONLY, request_span_names=["^root$"], **settings)
    assert (trace.query, trace.answer) == (QUESTION, ANSWER)
    assert trace.stages == {"total": pytest.approx(0.5)}
    no_query = TraceMapper(MappingConfig(request_span_names=["^root$"]))
    assert no_query.build(ROOT_ONLY, "otlp") is None


@pytest.mark.parametrize(
    ("mapping", "message"),
    [
        ({"span_kind_names": {"(": "LLM"}}, "is not a regular expression"),
        ({"span_kind_names": {"x": "JUDGE"}}, "span_kind_names.x"),
        ({"request_span_names": ["["]}, "is not a regular expression"),
        ({"json_documents": {"text_pointer": "node/text"}}, "is not a JSON pointer"),
        ({"json_usage": {"attribute": ENTITY_OUT}}, "needs input_tokens_pointer"),
        ({"json_usage": {"input_tokens_pointer": "/a", "output_tokens_pointer": "b"}},
         "is not a JSON pointer"),
        ({"query_pointers": [""]}, "names the whole value"),
    ],
    ids=["bad-kind-pattern", "unknown-kind", "bad-request-pattern", "pointer-without-slash",
         "usage-without-counts", "usage-pointer", "empty-query-pointer"],
)  # fmt: skip
def test_settings_are_checked_when_the_config_loads(mapping: dict[str, Any], message: str) -> None:
    """A bad pattern or pointer fails at start-up, naming the key."""
    with pytest.raises(ValidationError, match=message.replace("(", r"\(")):
        MappingConfig(**mapping)
