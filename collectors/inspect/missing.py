"""What a mapped trace lacks, and why (``rag-monitor inspect``).

A reason names what the mapping looked for and did not find; the ``mapping:`` settings
that would fill the field: ``collectors.inspect.suggest``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from collectors.inspect.shapes import holds_documents, never_evidence
from collectors.spans.config import MappingConfig
from collectors.spans.kinds import STAGE_OF_KIND
from collectors.spans.span import Span
from collectors.spans.tools import tool_name
from monitor.contract.trace import RagTrace

KIND_OF_STAGE = {stage: kind for kind, stage in STAGE_OF_KIND.items()}


def parsed_json(value: Any) -> Any:
    """JSON text parsed; any other value as it is."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


# --- why a field is missing -----------------------------------------------------------------


def not_a_request(spans: Sequence[Span], kinds: Mapping[str, str], mapping: MappingConfig) -> str:
    others = [kind for kind in mapping.request_kinds if kind != "LLM"]
    kinds_key = "collectors.spans.mapping.request_kinds"
    llm = "no LLM span" if "LLM" in mapping.request_kinds else f"LLM is not in {kinds_key}"
    with_kind = next((span for span in spans if kinds[span.span_id] in others), None)
    if with_kind is not None:
        why = (
            f'{kinds[with_kind.span_id]} span "{with_kind.name}" (of {kinds_key}) '
            "comes with no query"
        )
    else:
        why = f"no span of {kinds_key} {others} (those count with a query)"
    seen = ", ".join(sorted({kind for kind in kinds.values() if kind}) or ["none"])
    return f"not a RAG request: {llm}, and {why}; span kinds seen: {seen}"


@dataclass(frozen=True, slots=True)
class Mapped:
    """One trace as the mapping saw it: its spans, their kinds, those that judge the
    request instead of serving it, the request span and the ``RagTrace`` it became, under
    the ``mapping:`` settings used."""

    trace: RagTrace
    spans: Sequence[Span]
    kinds: Mapping[str, str]
    judged: Collection[str]
    request: Span
    mapping: MappingConfig

    def of_kind(self, kind: str) -> list[Span]:
        """The spans of ``kind`` that serve the request, below the request span, by start."""
        return sorted(
            (
                span
                for span in self.spans
                if self.kinds[span.span_id] == kind
                and span.span_id not in self.judged
                and span is not self.request
            ),
            key=lambda span: span.start_ns,
        )


class MissingReasons:
    """Why a field the coverage counts (``monitor.contract.field_presence.PRESENT``) is missing."""

    def __init__(self, mapped: Mapped) -> None:
        self._trace = mapped.trace
        self._spans = mapped.spans
        self._request = mapped.request
        self._mapping = mapped.mapping
        self._of_kind = mapped.of_kind
        self._request_kind = mapped.kinds[mapped.request.span_id]

    def missing(self, name: str) -> str:
        if name.startswith("stage_"):
            return self._stage(name.removeprefix("stage_"))
        return {
            "query": self._query,
            "answer": self._answer,
            "contexts": self._contexts,
            "retrieved_ids": self._retrieved_ids,
            "usage": self._usage,
            "query_vector": self._query_vector,
            "tenant": self._tenant,
        }.get(name, lambda: "not found")()

    def _io(self, which: str, key: str) -> str:
        # OpenInference's attribute, else OpenLLMetry's (as collectors.spans.text.io_value)
        name = f"{which}.value"
        if name not in self._request.attributes:
            name = f"traceloop.entity.{which}"
        value = self._request.attributes.get(name)
        where = f'the request span "{self._request.name}"'
        if value is None:
            return f"{where} has no {which}.value"
        if not isinstance(value, str) or not value:
            return f"{where}'s {name} is not text"
        if isinstance(parsed_json(value), list | dict):
            pointers = getattr(self._mapping, key)
            return (
                f"{where}'s {name} is JSON and no pointer of collectors.spans.mapping.{key} "
                f"{pointers} leads to text in it"
            )
        return f"{where}'s {name} is not usable text (a generator's repr?)"

    def _query(self) -> str:
        return (
            self._io("input", "query_pointers") + "; no query text on an EMBEDDING span, "
            "no RETRIEVER input, no user message on an LLM span"
        )

    def _answer(self) -> str:
        return self._io("output", "answer_pointers") + "; no LLM span's output text"

    def _contexts(self) -> str:
        retrievers = self._of_kind("RETRIEVER")
        if self._trace.contexts:
            reason = f"the {len(self._trace.contexts)} contexts carry no text"
        elif retrievers:
            names = ", ".join(f'"{span.name}"' for span in retrievers)
            reason = (
                f"RETRIEVER span {names} holds no documents the mapping reads "
                "(retrieval.documents.N.document.*, or documents in its JSON output.value)"
            )
        else:
            reason = "no RETRIEVER span with documents"
        tools = self._of_kind("TOOL")
        if tools:
            named = self._mapping.retrieval_tools
            calls = ", ".join(f'"{span.name}" (tool {tool_name(span)})' for span in tools)
            reason += f"; tool calls {calls} gave no documents (" + (
                f"collectors.spans.mapping.retrieval_tools {named} names the tools that retrieve)"
                if named
                else "no list of documents in their results)"
            )
        attributes = getattr(self._mapping, "document_attributes", None)
        if attributes is not None:
            key = "collectors.spans.mapping.document_attributes"
            reason += f"; no span holds an attribute of {key} {attributes}"
        ignored = sorted({
            f'{name} on "{span.name}"'
            for span in self._spans
            for name, value in span.attributes.items()
            if never_evidence(name) and holds_documents(parsed_json(value))
        })  # fmt: skip
        if ignored:
            reason += (
                f"; not proposed as documents: {', '.join(ignored)} (instructions, prompts, "
                "messages, tool arguments and inputs are never evidence)"
            )
        return reason

    def _retrieved_ids(self) -> str:
        derived = sum(context.id_derived for context in self._trace.contexts)
        if not self._trace.retrieved:
            return "no retrieved documents: " + self._contexts()
        return (
            f"{derived} of {len(self._trace.contexts)} documents came without an id (no "
            f"document id, no key of mapping.doc_id_keys {self._mapping.doc_id_keys} in "
            "their metadata): their ids were made from their text"
        )

    def _usage(self) -> str:
        llms = self._of_kind("LLM")
        if not llms:
            return "no LLM span"
        names = ", ".join(f'"{span.name}"' for span in llms)
        return f"LLM span {names} carries no token counts the mapping reads"

    def _query_vector(self) -> str:
        return "no EMBEDDING span with embedding.embeddings.0.embedding.vector"

    def _tenant(self) -> str:
        return (
            "no rag.tenant attribute, no key "
            f"{self._mapping.tenant_metadata_key!r} (mapping.tenant_metadata_key) in the "
            "request's metadata JSON, no resource attribute "
            f"{self._mapping.tenant_resource_attribute} (mapping.tenant_resource_attribute)"
        )

    def _stage(self, stage: str) -> str:
        if stage == "ttft":
            return (
                f"no event of mapping.first_token_events {self._mapping.first_token_events}, "
                "no llm.time_to_first_token on an LLM span"
            )
        kind = KIND_OF_STAGE[stage]
        if self._request_kind == kind:
            return f"the only {kind} span is the request span itself"
        return f"no {kind} span"
