"""What a span is, in OpenInference's words, whichever convention its instrumentation follows.

OpenInference names the kind outright (``openinference.span.kind``). The OTel GenAI
conventions name an operation (``gen_ai.operation.name``), OpenLLMetry (Traceloop) a
``traceloop.span.kind`` and, on model calls, an ``llm.request.type``. The first of these a
span carries that names a known kind wins; a span that names none is of no kind ("").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collectors.spans.span import Span

STAGE_OF_KIND = {
    "RETRIEVER": "retrieve",
    "RERANKER": "rerank",
    "EMBEDDING": "embed",
    "LLM": "generate",
}
# Spans whose nested LLM calls judge the request (an LLM judge, a moderation model):
# they are not its generation.
JUDGE_KINDS = frozenset({"EVALUATOR", "GUARDRAIL"})

_OPENINFERENCE_KIND = "openinference.span.kind"
_KIND_OF_GEN_AI_OPERATION = {
    "chat": "LLM",
    "text_completion": "LLM",
    "generate_content": "LLM",
    "embeddings": "EMBEDDING",
    "retrieval": "RETRIEVER",
    "invoke_agent": "AGENT",
    "create_agent": "AGENT",
    "invoke_workflow": "CHAIN",
    "execute_tool": "TOOL",
    # OpenLLMetry's own operation names: its LangChain retriever spans (0.53 and later)
    # and its model calls before it wrote "chat" (0.53, 0.54).
    "vector_db_retrieve": "RETRIEVER",
    "llm_request": "LLM",
    "rerank": "RERANKER",  # its LlamaIndex reranker spans
}
# A Traceloop "task" is any step of a chain (a prompt template, a parser, a lambda): no kind.
_KIND_OF_TRACELOOP_SPAN = {"workflow": "CHAIN", "agent": "AGENT", "tool": "TOOL"}
_KIND_OF_TRACELOOP_REQUEST = {
    "chat": "LLM",
    "completion": "LLM",
    "embedding": "EMBEDDING",
    "rerank": "RERANKER",
}


def span_kind(span: Span) -> str:
    """The span's OpenInference kind (upper case), or "" when no convention names one."""
    attributes = span.attributes
    kind = attributes.get(_OPENINFERENCE_KIND)
    if isinstance(kind, str):
        return kind.upper()
    return (
        _named(attributes, "gen_ai.operation.name", _KIND_OF_GEN_AI_OPERATION)
        or _named(attributes, "traceloop.span.kind", _KIND_OF_TRACELOOP_SPAN)
        or _named(attributes, "llm.request.type", _KIND_OF_TRACELOOP_REQUEST)
        or ("LLM" if "gen_ai.request.model" in attributes else "")
    )


def _named(attributes: Mapping[str, Any], name: str, kinds: Mapping[str, str]) -> str:
    value = attributes.get(name)
    return kinds.get(value, "") if isinstance(value, str) else ""
