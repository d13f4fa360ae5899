"""``rag-monitor inspect`` suggestions from the shapes of JSON values: document lists,
token usage, the request span by name; each checked by mapping again, none changing a
field that was there; the instrumentation scopes counted as ``other``."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import yaml

from collectors.inspect.view import summary
from collectors.spans.config import MappingConfig
from collectors.spans.openinference import TraceMapper
from monitor.contract.field_presence import DEFAULT_INSTRUMENTATIONS
from tests.unit.collectors.inspect.test_command import SCOPE, report_of, span
from tests.unit.collectors.spans import test_named_json as named_json
from tests.unit.collectors.spans.test_named_json import (
    ANSWER,
    ENTITY_IN,
    ENTITY_OUT,
    QUESTION,
    SPANS,
    node,
)

# A workflow span with the question and the answer in its JSON, written by SCOPE.
ROOT_ONLY = [dataclasses.replace(held, scope=SCOPE) for held in named_json.ROOT_ONLY]


def remapped(spans: list[Any], snippet: dict[str, Any]) -> Any:
    return TraceMapper(MappingConfig(**snippet)).build(spans, "otlp")


def test_a_root_with_question_and_answer_is_proposed_as_the_request_span() -> None:
    """No LLM or RETRIEVER span: the root whose JSON input and output hold a question and
    an answer is proposed by name, with the pointers; with the snippet the trace is a
    request with query, answer and total latency."""
    report = report_of(ROOT_ONLY)
    assert not report["rag_request"]
    snippet = report["mapping"]
    assert snippet["request_span_names"] == ["^root$"]
    assert snippet["query_pointers"][-1] == "/request/question"
    assert snippet["answer_pointers"][-1] == "/final/answer"
    trace = remapped(ROOT_ONLY, snippet)
    assert trace is not None
    assert (trace.query, trace.answer, trace.stages) == (QUESTION, ANSWER, {"total": 0.5})


def test_a_root_with_plain_question_and_answer_needs_only_its_name() -> None:
    """Plain-text input and output on a root of no request kind: the name alone."""
    spans = [
        span("agent_run", None, "TOOL", 1000, 1800,
             **{"input.value": QUESTION, "output.value": ANSWER}),
        span("lookup", "agent_run", "TOOL", 1100, 1300),
    ]  # fmt: skip
    report = report_of(spans)
    assert report["mapping"] == {"request_span_names": ["^agent_run$"]}
    assert report["mapping_fills"] == {"request_span_names": ["request"]}
    trace = remapped(spans, report["mapping"])
    assert (trace.query, trace.answer, trace.stages) == (QUESTION, ANSWER, {"total": 0.8})


def test_documents_and_usage_in_json_values_get_settings_that_read_them() -> None:
    """A dispatcher-style trace: the request span, the retriever and the LLM call by name,
    the documents (JSON text in a JSON list) and the usage (JSON text in the output)
    found by shape; mapping again with the snippet fills contexts, ids, usage, stages."""
    spans = SPANS
    snippet = report_of(spans)["mapping"]
    assert snippet["json_documents"] == {
        "attribute": ENTITY_OUT, "list_pointer": "", "text_pointer": "/node/text",
        "id_pointer": "/node/id_", "metadata_pointer": "/node/metadata",
        "score_pointer": "/score",
    }  # fmt: skip
    assert snippet["json_usage"] == {
        "attribute": ENTITY_OUT,
        "input_tokens_pointer": "/raw/usage/prompt_tokens",
        "output_tokens_pointer": "/raw/usage/completion_tokens",
        "model_pointer": "/raw/model",
    }
    trace = remapped(spans, snippet)
    assert [c.doc_id for c in trace.contexts] == ["doc-4", "doc-5"]
    assert trace.usage[0].prompt_tokens == 71
    assert {"retrieve", "generate"} <= trace.stages.keys()


def test_a_suggestion_that_would_change_a_field_already_there_is_never_printed() -> None:
    """The documents sit in a step whose input holds a rewritten query: read as the
    retriever, its input would replace the query the LLM span gave. Mapping again shows
    it, so the setting is not suggested, though it would fill the contexts."""
    spans = [
        span("root", None, "CHAIN", 1000, 2000, **{"output.value": ANSWER}),
        span("step", "root", None, 1010, 1090, **{
            ENTITY_IN: json.dumps({"query": "invoices issued date"}),
            ENTITY_OUT: json.dumps([node("n1", "doc-4", "Invoices: first day.", 0.8)]),
        }),
        span("chat", "root", None, 1100, 1900, **{
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps([{"role": "user", "content": QUESTION}]),
        }),
    ]  # fmt: skip
    report = report_of(spans)
    assert "contexts" in report["missing"]
    assert "json_documents" not in report["mapping"]
    # The same setting does fill the contexts: only the changed query stopped it.
    trial = remapped(spans, {
        "json_documents": {"attribute": ENTITY_OUT, "text_pointer": "/node/text"},
        "span_kind_names": {"^step$": "RETRIEVER"},
    })  # fmt: skip
    assert [c.text for c in trial.contexts] == ["Invoices: first day."]
    assert trial.query != QUESTION


def test_a_list_that_does_not_fill_the_field_when_mapped_again_is_not_suggested() -> None:
    """Document-shaped objects whose texts are blank: mapping again fills no context."""
    blank = json.dumps([{"id": "k1", "text": "  "}, {"id": "k2", "text": "\n"}])
    spans = [
        span("root", None, "CHAIN", 1000, 2000, **{"input.value": QUESTION}),
        span("step", "root", None, 1010, 1090, **{ENTITY_OUT: blank}),
        span("chat", "root", None, 1100, 1900, **{"gen_ai.operation.name": "chat"}),
    ]
    report = report_of(spans)
    assert "contexts" in report["missing"]
    assert report["mapping"] == {}


def test_the_summary_names_the_scopes_counted_as_other() -> None:
    """A scope not in service.instrumentations is named, and the snippet adds it."""
    text = summary([report_of(ROOT_ONLY)], DEFAULT_INSTRUMENTATIONS)
    assert f"instrumentation scope {SCOPE} (counted as other in field coverage" in text
    pasted = yaml.safe_load(text[text.index("suggested mapping") :].split("\n", 1)[1])
    assert pasted["service"]["instrumentations"] == [*DEFAULT_INSTRUMENTATIONS, SCOPE]
    assert pasted["collectors"]["spans"]["mapping"]["request_span_names"] == ["^root$"]
    assert "counted as other" not in summary([report_of(ROOT_ONLY)], [SCOPE])
