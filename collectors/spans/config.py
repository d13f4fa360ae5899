"""``collectors.spans``: how spans from every collector become ``RagTrace`` values.

``assembly`` bounds the wait for a trace's spans; ``mapping`` says where the span
mapping (``collectors/spans/openinference.py``) finds each field in traces it did not
shape itself. Both apply whichever collector the spans came in by.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from monitor.contract.section import Patterns, Section, all_compile


class AssemblyConfig(Section):
    grace_s: float = Field(2.0, ge=0, description="wait after the root span for late children")
    ttl_s: float = Field(60.0, gt=0, description="emit a trace without root after this (expired)")
    max_pending_traces: int = Field(
        100_000, gt=0, description="traces held at most; the oldest is emitted early beyond it"
    )
    max_spans_per_trace: int = Field(
        5_000,
        gt=0,
        description="spans held per trace at most; further spans of that trace are refused "
        "(rag_monitor_refused_spans_total) and the trace is emitted with those it holds",
    )


SpanKind = Literal["LLM", "RETRIEVER", "RERANKER", "EMBEDDING", "CHAIN", "AGENT", "TOOL"]
_RAG_SPAN_KINDS: list[SpanKind] = ["LLM", "RETRIEVER"]


def _json_pointer(pointer: str) -> str:
    if pointer and not pointer.startswith("/"):
        raise ValueError(f"{pointer!r} is not a JSON pointer (RFC 6901): start it with '/'")
    return pointer


class JsonDocumentsConfig(Section):
    """Documents inside a span's JSON value (read on RETRIEVER and RERANKER spans whose
    document attributes hold none): where the list is, and where each document keeps its
    fields. JSON encoded inside a JSON string is read as JSON at any step."""

    attribute: str = Field(
        "",
        description='span attribute whose JSON value holds the documents ("": none is read, '
        "the default: nothing is looked for)",
    )
    list_pointer: str = Field(
        "", description='JSON pointer to the list of documents in it ("": the value itself)'
    )
    text_pointer: str = Field(
        "",
        description='JSON pointer to a document\'s text, in the document ("": the document '
        "itself is the text)",
    )
    id_pointer: str = Field(
        "", description='JSON pointer to a document\'s own id, in the document ("": none)'
    )
    score_pointer: str = Field(
        "", description='JSON pointer to a document\'s score, in the document ("": none)'
    )
    metadata_pointer: str = Field(
        "",
        description="JSON pointer to a document's metadata object, in the document "
        '(mapping.doc_id_keys name its source id there; "": none)',
    )

    @field_validator("list_pointer", "text_pointer", "id_pointer", "score_pointer",
                     "metadata_pointer")  # fmt: skip
    @classmethod
    def _pointers(cls, pointer: str) -> str:
        return _json_pointer(pointer)


class JsonUsageConfig(Section):
    """An LLM call's token counts and model inside a span's JSON value (a raw provider
    response an instrumentation wrote whole), read on LLM spans whose usage attributes
    count none."""

    attribute: str = Field(
        "",
        description='span attribute whose JSON value holds the usage ("": none is read, the '
        "default: nothing is looked for)",
    )
    input_tokens_pointer: str = Field(
        "", description="JSON pointer to the input token count (required with an attribute)"
    )
    output_tokens_pointer: str = Field(
        "", description="JSON pointer to the output token count (required with an attribute)"
    )
    model_pointer: str = Field(
        "", description='JSON pointer to the model name ("": the span\'s model attribute)'
    )

    @field_validator("input_tokens_pointer", "output_tokens_pointer", "model_pointer")
    @classmethod
    def _pointers(cls, pointer: str) -> str:
        return _json_pointer(pointer)

    @model_validator(mode="after")
    def _counts_named(self) -> JsonUsageConfig:
        if self.attribute and not (self.input_tokens_pointer and self.output_tokens_pointer):
            raise ValueError("an attribute needs input_tokens_pointer and output_tokens_pointer")
        return self


class MappingConfig(Section):
    """Where the span mapping finds each ``RagTrace`` field in traces it did not shape itself."""

    request_kinds: list[SpanKind] = Field(
        default_factory=lambda: list(_RAG_SPAN_KINDS),
        description="a trace is a RAG request when it holds a span of one of these kinds "
        "(kinds other than LLM only with a query); others count as not_rag",
    )
    query_pointers: list[str] = Field(
        default_factory=lambda: ["/query", "/question", "/query_str", "/input", "/task"],
        description="JSON pointers into the request span's JSON input.value, tried in order",
    )
    answer_pointers: list[str] = Field(
        default_factory=lambda: ["/answer", "/response", "/output", "/result", "/content"],
        description="JSON pointers into the request span's JSON output.value, tried in order",
    )
    doc_id_keys: list[str] = Field(
        default_factory=lambda: ["doc_id", "document_id", "ref_doc_id", "source_id"],
        description="document metadata keys holding the source document id; the span's "
        "document id then becomes the chunk id",
    )
    tenant_metadata_key: str = Field(
        "tenant", description="key of the caller's tenant in the request's metadata JSON"
    )
    tenant_resource_attribute: str = Field(
        "rag.tenant", description="resource attribute read for the tenant when spans lack one"
    )
    first_token_events: list[str] = Field(
        default_factory=lambda: ["first_token", "First Token Stream Event"],
        description="span event names that mark the first streamed token",
    )
    document_attributes: list[str] = Field(
        default_factory=list,
        description="span attributes holding a request's documents (JSON objects, NAME.N.*)",
    )
    json_documents: JsonDocumentsConfig = Field(
        default_factory=JsonDocumentsConfig,
        description="documents of RETRIEVER and RERANKER spans inside a JSON attribute, read "
        "where the conventions' document attributes hold none",
    )
    json_usage: JsonUsageConfig = Field(
        default_factory=JsonUsageConfig,
        description="token counts of LLM spans inside a JSON attribute, read where the "
        "conventions' usage attributes hold none",
    )
    span_kind_names: dict[str, SpanKind] = Field(
        default_factory=dict,
        description="span name regular expression -> kind, for spans no convention gives a "
        "kind (a retriever call named after its class); of nested calls that match the same "
        "kind only the innermost gets it",
    )
    request_span_names: Patterns = Field(
        default_factory=list,
        description="span name regular expressions of the span standing for the request; the "
        "shallowest match is the request span, and a trace whose request span matches counts "
        "as a request when it gives a query",
    )
    retrieval_tools: Patterns = Field(
        default_factory=list,
        description="tool name regular expressions of the tools that retrieve: their calls, and "
        "only theirs, are retrieval steps (empty: a tool call is one when its result is a list "
        "of documents)",
    )

    @field_validator("query_pointers", "answer_pointers")
    @classmethod
    def _json_pointers(cls, pointers: list[str]) -> list[str]:
        for pointer in pointers:
            if not pointer:
                raise ValueError("an empty JSON pointer names the whole value, not a text in it")
            _json_pointer(pointer)
        return pointers

    @field_validator("span_kind_names")
    @classmethod
    def _name_patterns(cls, names: dict[str, SpanKind]) -> dict[str, SpanKind]:
        all_compile(list(names))
        return names


class SpansConfig(Section):
    """``collectors.spans``: the span assembly and the span mapping."""

    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig, description="span assembly")
    mapping: MappingConfig = Field(
        default_factory=MappingConfig, description="spans -> RagTrace: where each field is found"
    )
