"""``collectors.spans``: how spans from every collector become ``RagTrace`` values.

``assembly`` bounds the wait for a trace's spans; ``mapping`` says where the span
mapping (``collectors/spans/openinference.py``) finds each field in traces it did not
shape itself. Both apply whichever collector the spans came in by.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from monitor.section import Section


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


class MappingConfig(Section):
    """Where the span mapping finds each ``RagTrace`` field in traces it did not shape itself."""

    request_kinds: list[SpanKind] = Field(
        default_factory=lambda: list(_RAG_SPAN_KINDS),
        description="a trace is a RAG request when it holds a span of one of these kinds "
        "(kinds other than LLM only with a query); others count as not_rag",
    )
    query_pointers: list[str] = Field(
        default_factory=lambda: ["/query", "/question", "/query_str", "/input"],
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

    @field_validator("query_pointers", "answer_pointers")
    @classmethod
    def _json_pointers(cls, pointers: list[str]) -> list[str]:
        for pointer in pointers:
            if not pointer.startswith("/"):
                raise ValueError(f"{pointer!r} is not a JSON pointer (RFC 6901): start it with '/'")
        return pointers


class SpansConfig(Section):
    """``collectors.spans``: the span assembly and the span mapping."""

    assembly: AssemblyConfig = Field(default_factory=AssemblyConfig, description="span assembly")
    mapping: MappingConfig = Field(
        default_factory=MappingConfig, description="spans -> RagTrace: where each field is found"
    )
