"""``rag-monitor inspect``: provenance of every mapped field, reasons for missing ones,
verified ``mapping:`` suggestions, reading OTLP files, the terminal view and exit codes."""

from __future__ import annotations

import dataclasses
import io
import json
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

from collectors.inspect.command import read_otlp_file, receive_otlp
from collectors.inspect.provenance import inspect_trace
from collectors.inspect.view import render, shown
from collectors.spans.config import MappingConfig
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span, SpanEvent
from monitor.contract.config import Config
from monitor.contract.field_presence import PRESENT
from monitor.runtime.cli import main
from tests.conftest import to_otlp_json, wait_until
from tests.otel_traffic import MemoryExporter, tracer_for
from tests.unit.collectors.spans.test_openinference import span as openinference_span

MS = 1_000_000
SCOPE = "acme.rag.tracer"
QUERY = "how long do returns take?"
ANSWER = "Returns are accepted for thirty days."


def span(
    span_id: str,
    parent: str | None,
    kind: str | None,
    start_ms: int,
    end_ms: int,
    **attributes: Any,
) -> Span:
    """A span of ``test_openinference``'s shape, written by an instrumentation ``SCOPE``."""
    plain = openinference_span(span_id, parent, kind, start_ms, end_ms, **attributes)
    return dataclasses.replace(plain, resource={"service.name": "acme"}, scope=SCOPE)


def with_event(held: Span, name: str, at_ms: int) -> Span:
    return dataclasses.replace(held, events=(SpanEvent(name, at_ms * MS, {}),))


def openinference_spans() -> list[Span]:
    return [
        span("root", None, "CHAIN", 1000, 2000, **{"input.value": QUERY, "output.value": ANSWER}),
        span("retrieve", "root", "RETRIEVER", 1010, 1090, **{
            "retrieval.documents.0.document.id": "d1",
            "retrieval.documents.0.document.content": "Returns: thirty days.",
            "retrieval.documents.0.document.score": 0.8,
            "retrieval.documents.1.document.id": "d2",
            "retrieval.documents.1.document.content": "Shipping is free.",
        }),
        span("llm", "root", "LLM", 1100, 1900, **{
            "llm.model_name": "gpt-4o", "llm.token_count.prompt": 900,
            "llm.token_count.completion": 120,
        }),
    ]  # fmt: skip


def origin(entry: dict[str, Any]) -> tuple[str, str, str]:
    """(span name, attribute, pointer) of the first place holding a field."""
    first = entry["from"][0]
    return first["span"], first.get("name", ""), first.get("pointer", "")


def report_of(spans: list[Span], **mapping: Any) -> dict[str, Any]:
    return inspect_trace(spans, MappingConfig(**mapping))


# --- provenance -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (("query",), ("root", "input.value", "")),
        (("answer",), ("root", "output.value", "")),
        (("contexts", 0, "text"), ("retrieve", "retrieval.documents.0.document.content", "")),
        (("contexts", 1, "doc_id"), ("retrieve", "retrieval.documents.1.document.id", "")),
        (("contexts", 0, "score"), ("retrieve", "retrieval.documents.0.document.score", "")),
        (("usage", 0, "model"), ("llm", "llm.model_name", "")),
        (("usage", 0, "prompt_tokens"), ("llm", "llm.token_count.prompt", "")),
        (("usage", 0, "completion_tokens"), ("llm", "llm.token_count.completion", "")),
        (("retrieved",), ("retrieve", "retrieval.documents.N.document.id", "")),
        (("service_name",), ("root", "service.name", "")),
    ],
    ids=lambda value: ".".join(map(str, value)) if isinstance(value, tuple) else None,
)
def test_each_field_names_the_span_and_attribute_it_came_from(
    path: tuple[Any, ...], expected: tuple[str, str, str]
) -> None:
    """An OpenInference trace: each mapped value is traced to the span attribute holding it."""
    entry: Any = report_of(openinference_spans())["fields"]
    for step in path:
        entry = entry[step]
    assert origin(entry) == expected


def test_values_inside_json_attributes_are_named_by_json_pointer() -> None:
    """Documents in a retriever's JSON output and a query in GenAI messages: the pointer."""
    documents = {"documents": [{"id": "x1", "page_content": "Returns: thirty days."}]}
    messages = [
        {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]},
        {"role": "user", "parts": [{"type": "text", "content": QUERY}]},
    ]
    spans = [
        span("root", None, None, 1000, 2000),
        span("retrieve", "root", "RETRIEVER", 1010, 1090, **{"output.value": json.dumps(documents)}),
        span("chat", "root", None, 1100, 1900, **{
            "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(messages),
        }),
    ]  # fmt: skip
    fields = report_of(spans)["fields"]
    assert origin(fields["query"]) == ("chat", "gen_ai.input.messages", "/1/parts/0/content")
    assert origin(fields["contexts"][0]["text"]) == ("retrieve", "output.value", "/documents/0/page_content")  # fmt: skip
    assert origin(fields["contexts"][0]["doc_id"]) == (
        "retrieve",
        "output.value",
        "/documents/0/id",
    )


def test_stages_are_derived_from_span_times_and_name_their_spans() -> None:
    """Stage seconds are derived: the entry says so and lists the spans of the stage."""
    stages = report_of(openinference_spans())["fields"]["stages"]
    assert "duration" in stages["total"]["derived"]
    assert origin(stages["total"]) == ("root", "", "")
    assert "RETRIEVER" in stages["retrieve"]["derived"]
    assert [place["span"] for place in stages["retrieve"]["from"]] == ["retrieve"]
    assert stages["retrieve"]["from"][0]["in"] == "times"


def test_time_to_first_token_names_its_event() -> None:
    """TTFT from a first-token event: the event and its span are named."""
    spans = openinference_spans()
    spans[2] = with_event(spans[2], "first_token", 1150)
    ttft = report_of(spans)["fields"]["stages"]["ttft"]
    assert ttft["value"] == pytest.approx(0.05)
    assert ttft["from"][0] == {
        "span": "llm", "span_id": "llm".ljust(16, "0"), "scope": SCOPE, "in": "event",
        "name": "first_token",
    }  # fmt: skip


# --- what is missing and why ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("spans", "reason"),
    [
        (
            [span("root", None, "CHAIN", 1, 9, **{"input.value": QUERY})],
            "not a RAG request: no LLM span, and no span of collectors.spans.mapping.request_kinds "
            "['RETRIEVER'] (those count with a query); span kinds seen: CHAIN",
        ),
        (
            [span("root", None, None, 1, 9), span("r", "root", "RETRIEVER", 2, 8)],
            'not a RAG request: no LLM span, and RETRIEVER span "r" (of '
            "collectors.spans.mapping.request_kinds) comes with no query; span kinds seen: RETRIEVER",
        ),
    ],
    ids=["chain-only", "retriever-without-query"],
)
def test_a_trace_that_is_no_request_says_why(spans: list[Span], reason: str) -> None:
    """A trace the mapping does not read as a RAG request is reported with the reason."""
    report = report_of(spans)
    assert report["rag_request"] is False
    assert report["missing"] == {"request": reason}
    assert report["mapping"] == {}


def test_missing_fields_are_the_coverage_fields_with_reasons() -> None:
    """Exactly the fields the coverage counts as absent are missing, each with its reason."""
    spans = openinference_spans()
    spans[1] = span("retrieve", "root", "RETRIEVER", 1010, 1090)  # no documents
    report = report_of(spans)
    trace = TraceMapper().build(spans, "otlp")
    assert trace is not None
    assert set(report["missing"]) == {name for name, ok in PRESENT.items() if not ok(trace)}
    assert report["missing"]["contexts"].startswith(
        'RETRIEVER span "retrieve" holds no documents the mapping reads'
    )
    assert report["missing"]["query_vector"] == (
        "no EMBEDDING span with embedding.embeddings.0.embedding.vector"
    )
    assert report["missing"]["stage_rerank"] == "no RERANKER span"


# --- suggestions ------------------------------------------------------------------------------


def _chat(**attributes: Any) -> Span:
    return span("chat", "root", "LLM", 1100, 1900, **attributes)


SUGGESTIONS = [
    pytest.param(
        [span("root", None, "CHAIN", 1000, 2000, **{
            "input.value": json.dumps({"request": {"id": 7, "text": QUERY}}), "output.value": ANSWER,
        }), _chat()],
        "query", {"query_pointers": [*MappingConfig().query_pointers, "/request/text"]},
        id="query-in-json-input",
    ),
    pytest.param(
        [span("root", None, "CHAIN", 1000, 2000, **{"input.value": json.dumps({"pipeline": "p"})}),
         span("retrieve", "root", "RETRIEVER", 1010, 1090, **{
            "input.value": json.dumps({"data": {"question": QUERY}}),
         }), _chat()],
        "query", {"query_pointers": [*MappingConfig().query_pointers, "/data/question"]},
        id="query-in-the-retrievers-json-input",
    ),
    pytest.param(
        [span("root", None, "CHAIN", 1000, 2000, **{
            "input.value": QUERY, "output.value": json.dumps({"status": "ok", "reply": [ANSWER]}),
        }), _chat()],
        "answer", {"answer_pointers": [*MappingConfig().answer_pointers, "/reply/0"]},
        id="answer-in-json-output",
    ),
    pytest.param(
        [span("root", None, "CHAIN", 1000, 2000, **{
            "input.value": QUERY, "metadata": json.dumps({"org": "acme", "plan": "gold"}),
        }), _chat()],
        "tenant", {"tenant_metadata_key": "org"},
        id="tenant-under-a-metadata-key",
    ),
    pytest.param(
        [span("root", None, "CHAIN", 1000, 2000, **{"input.value": QUERY}),
         with_event(span("chat", "root", "LLM", 1100, 1900), "token.first", 1200)],
        "stage_ttft",
        {"first_token_events": [*MappingConfig().first_token_events, "token.first"]},
        id="first-token-event",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("spans", "field", "snippet"), SUGGESTIONS)
def test_a_missing_field_held_elsewhere_gets_a_mapping_that_fills_it(
    spans: list[Span], field: str, snippet: dict[str, Any]
) -> None:
    """The suggestion names the place, keeps the configured entries, and fills the field."""
    report = report_of(spans)
    assert field in report["missing"]
    assert report["mapping"] == snippet
    assert field in report["mapping_fills"][next(iter(snippet))]
    remapped = TraceMapper(MappingConfig(**snippet)).build(spans, "otlp")
    assert remapped is not None
    assert PRESENT[field](remapped)


def test_a_setting_that_does_not_fill_the_field_is_not_suggested() -> None:
    """A first-token event before its span's start gives no TTFT: mapping again with its
    name fills nothing, so it is not suggested."""
    spans = [
        span("root", None, "CHAIN", 1000, 2000, **{"input.value": QUERY}),
        with_event(span("chat", "root", "LLM", 1100, 1900), "token.first", 1050),
    ]
    report = report_of(spans)
    assert "stage_ttft" in report["missing"]
    assert report["mapping"] == {}


def test_system_prompts_and_chat_messages_are_never_suggested() -> None:
    """A system message is no query pointer; a message list is no document attribute."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    spans = [
        span("root", None, "CHAIN", 1000, 2000, **{
            "input.value": json.dumps({"messages": [{"role": "system", "content": "Be brief."}]}),
        }),
        _chat(**{"acme.chat.history": json.dumps(messages)}),
    ]  # fmt: skip
    report = report_of(spans)
    assert {"query", "contexts"} <= set(report["missing"])
    assert report["mapping"] == {}


DOCUMENT_SUGGESTIONS = [
    pytest.param(
        {"acme.retrieval.hits": json.dumps([
            {"id": "k1", "text": "Returns: thirty days."}, {"id": "k2", "text": "Free shipping."},
        ])},
        "contexts", {"document_attributes": ["acme.retrieval.hits"]},
        ("search", "acme.retrieval.hits", "/1/text"),
        id="json-list-under-an-unknown-attribute",
    ),
    pytest.param(
        {"acme.hits.0.id": "k1", "acme.hits.0.text": "Returns: thirty days.",
         "acme.hits.1.id": "k2", "acme.hits.1.text": "Free shipping."},
        "contexts", {"document_attributes": ["acme.hits"]},
        ("search", "acme.hits.1.text", ""),
        id="indexed-family",
    ),
    pytest.param(
        {"openinference.span.kind": "RETRIEVER",
         "retrieval.documents.0.document.content": "Returns: thirty days.",
         "retrieval.documents.0.document.metadata": json.dumps({"source_doc": "policy-7"}),
         "retrieval.documents.1.document.content": "Free shipping.",
         "retrieval.documents.1.document.metadata": json.dumps({"source_doc": "policy-9"})},
        "retrieved_ids", {"doc_id_keys": [*MappingConfig().doc_id_keys, "source_doc"]},
        ("search", "retrieval.documents.1.document.content", ""),
        id="source-id-under-a-metadata-key",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("attributes", "field", "snippet", "text_origin"), DOCUMENT_SUGGESTIONS)
def test_documents_the_mapping_cannot_read_get_the_setting_that_reads_them(
    attributes: dict[str, Any],
    field: str,
    snippet: dict[str, Any],
    text_origin: tuple[str, str, str],
) -> None:
    """Documents under an unknown attribute (JSON list or indexed family) or with their
    source id under an unknown metadata key: the setting, and with it the field is filled."""
    spans = [
        span("root", None, None, 1000, 2000, **{"input.value": QUERY, "output.value": ANSWER}),
        span("search", "root", None, 1010, 1090, **attributes),
        span("chat", "root", None, 1100, 1900, **{"gen_ai.operation.name": "chat"}),
    ]
    report = report_of(spans)
    assert field in report["missing"]
    assert report["mapping"] == snippet
    assert field in report["mapping_fills"][next(iter(snippet))]
    fixed = report_of(spans, **snippet)
    assert field not in fixed["missing"]
    assert origin(fixed["fields"]["contexts"][1]["text"]) == text_origin


def test_a_document_without_an_id_shows_its_id_as_derived() -> None:
    """A document without an id is a context whose id is derived from its text."""
    spans = openinference_spans()
    spans[1] = span("retrieve", "root", "RETRIEVER", 1010, 1090, **{
        "retrieval.documents.0.document.content": "Returns: thirty days.",
    })  # fmt: skip
    context = report_of(spans)["fields"]["contexts"][0]
    assert context["id_derived"] is True
    assert context["doc_id"]["value"].startswith("sha256:")
    assert context["doc_id"]["derived"] == "made from the document's text: it came without an id"
    assert "from" not in context["doc_id"]


# --- reading OTLP files -----------------------------------------------------------------------


def sdk_proto() -> bytes:
    """One small request through the real SDK, as an OTLP protobuf body."""
    exporter = MemoryExporter()
    provider, tracer = tracer_for(exporter)
    with (
        tracer.start_as_current_span("root", attributes={"input.value": QUERY}),
        tracer.start_as_current_span("llm", attributes={"openinference.span.kind": "LLM"}),
    ):
        pass
    provider.shutdown()
    return bytes(encode_spans(exporter.spans).SerializeToString())


def framed(*messages: bytes) -> bytes:
    return b"".join(len(m).to_bytes(4, "big") + m for m in messages)


READS = [
    pytest.param(lambda b: to_otlp_json(b) + b"\n{not json\n" + to_otlp_json(b) + b"\n", 4,
                 [", line 2: invalid JSON"], id="json-lines-with-a-bad-line"),
    pytest.param(lambda b: json.dumps(json.loads(to_otlp_json(b)), indent=2).encode(), 2, [],
                 id="one-pretty-json-document"),
    pytest.param(lambda b: b, 2, [], id="bare-protobuf"),
    pytest.param(lambda b: framed(b, b), 4, [], id="length-prefixed-protobuf"),
    pytest.param(lambda b: framed(b) + b"\x00\x00\x10\x00abc", 2,
                 [", message 2 (byte "], id="truncated-length-prefixed"),
    pytest.param(lambda b: framed(b, b"\x0a\x03abc"), 2,
                 [", message 2 (byte ", "undecodable protobuf"], id="bad-protobuf-message"),
    pytest.param(lambda b: b"\x28\xb5\x2f\xfd" + b, 0, ["zstd -d"], id="zstd"),
    pytest.param(lambda b: b"  \n", 0, [": empty"], id="empty"),
    pytest.param(lambda b: b"hello", 0, ["neither OTLP/JSON nor OTLP protobuf"], id="not-otlp"),
]  # fmt: skip


@pytest.mark.parametrize(("content", "spans", "problems"), READS)
def test_otlp_files_are_read_and_bad_parts_reported(
    tmp_path: Path, content: Any, spans: int, problems: list[str]
) -> None:
    """Each file format gives its spans; a bad line or message is named and skipped."""
    path = tmp_path / "traces"
    path.write_bytes(content(sdk_proto()))
    read, reported = read_otlp_file(path)
    assert len(read) == spans
    assert all(s.scope == "tests" for s in read)
    for expected in problems:
        assert any(expected in line for line in reported), reported
    assert bool(reported) == bool(problems)


def test_receiving_over_otlp_http_answers_the_export_and_keeps_the_spans() -> None:
    """``--listen``: POST /v1/traces is answered 200 with an export response; spans kept."""
    config = Config.model_validate({})
    out = _Lines()
    result: list[Span] = []
    listener = threading.Thread(target=lambda: result.extend(receive_otlp(config, 0, 3, out)))
    listener.start()
    line = wait_until(lambda: out.text)
    port = int(line.split(":")[1].split()[0])
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces", data=sdk_proto(),
        headers={"Content-Type": "application/x-protobuf"}, method="POST",
    )  # fmt: skip
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
        answer = ExportTraceServiceResponse.FromString(response.read())
    listener.join(10)
    assert not answer.HasField("partial_success")
    assert sorted(s.name for s in result) == ["llm", "root"]


class _Lines(io.StringIO):
    @property
    def text(self) -> str:
        return self.getvalue()


# --- the terminal view and the command ---------------------------------------------------------


def test_terminal_view_escapes_control_characters_and_cuts_long_text() -> None:
    """Escape sequences and bidi overrides are escaped; a long text shows its length."""
    assert shown("red\x1b[31m\nnext\u202e") == '"red\\x1b[31m\\nnext\\u202e"'
    long = "x" * 500
    assert shown(long) == '"' + "x" * 160 + '"... (500 characters)'


def test_terminal_view_shows_fields_missing_and_the_snippet() -> None:
    """The rendered report holds the origin lines, the reasons and the YAML snippet."""
    spans = SUGGESTIONS[0].values[0]
    assert isinstance(spans, list)
    text = render(report_of(spans))
    assert "query_pointers: [/query, /question, /query_str, /input, /task, /request/text]" in text
    assert '<- span "root" ' in text
    assert "missing\n    query" in text


@pytest.mark.usefixtures("restored_logging")
def test_exit_codes_and_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """0 with a trace inspected (one JSON object per trace), 1 with nothing readable, 2 on
    usage errors."""
    good = tmp_path / "good.jsonl"
    good.write_bytes(to_otlp_json(sdk_proto()) + b"\n" + to_otlp_json(sdk_proto()) + b"\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"{oops\n")
    assert main(["inspect", str(good), "--json"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["rag_request"] for line in lines] == [True, True]
    assert main(["inspect", str(bad)]) == 1
    assert "bad.jsonl: invalid JSON" in capsys.readouterr().err
    for argv in ([], [str(good), "--listen", "0", "--seconds", "1"], ["--listen", "0"]):
        assert main(["inspect", *argv]) == 2
    assert "give FILE... or --listen" in capsys.readouterr().err
