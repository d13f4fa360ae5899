"""What a mapped trace lacks, why, and the ``mapping:`` settings that would fill it
(``rag-monitor inspect``).

A reason names what the mapping looked for and did not find. A suggestion comes from
where the value sits in the spans (documents under an attribute the mapping does not
know, a query inside a JSON input, a tenant under another metadata key) and is kept only
when mapping the trace again with it fills the field.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from collectors.spans.config import MappingConfig
from collectors.spans.kinds import STAGE_OF_KIND
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span
from monitor.coverage import PRESENT, stage_field
from monitor.trace import RagTrace

KIND_OF_STAGE = {stage: kind for kind, stage in STAGE_OF_KIND.items()}
# Keys whose value reads as a document's text, in a list of objects or an indexed family.
_TEXT_KEYS = frozenset({"content", "text", "page_content", "document", "chunk", "passage"})
# Attribute families that hold chat messages, never documents.
_MESSAGE_WORDS = ("message", "prompt", "completion")
_QUERY_KEYS = frozenset({
    "query", "question", "q", "text", "content", "prompt", "input", "message",
    "user_input", "user_query", "query_text", "search", "utterance",
})  # fmt: skip
_ANSWER_KEYS = frozenset({
    "answer", "response", "output", "result", "content", "text", "reply",
    "completion", "generation", "message", "output_text", "final_answer",
})  # fmt: skip
_TENANT_WORDS = ("tenant", "org", "customer", "account", "workspace", "company", "client")
_SOURCE_ID_WORDS = ("source", "doc", "ref", "parent", "file", "url", "path")
_INDEXED = re.compile(r"^(.+?)\.(\d+)\.(.+)$")


def parsed_json(value: Any) -> Any:
    """JSON text parsed; any other value as it is."""
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def escape_pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


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
    """Why a field the coverage counts (``monitor.coverage.PRESENT``) is missing."""

    def __init__(self, mapped: Mapped) -> None:
        self._trace = mapped.trace
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
        value = self._request.attributes.get(f"{which}.value")
        where = f'the request span "{self._request.name}"'
        if value is None:
            return f"{where} has no {which}.value"
        if not isinstance(value, str) or not value:
            return f"{where}'s {which}.value is not text"
        if isinstance(parsed_json(value), list | dict):
            pointers = getattr(self._mapping, key)
            return (
                f"{where}'s {which}.value is JSON and no pointer of collectors.spans.mapping.{key} "
                f"{pointers} leads to text in it"
            )
        return f"{where}'s {which}.value is not usable text (a generator's repr?)"

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
        attributes = getattr(self._mapping, "document_attributes", None)
        if attributes is not None:
            key = "collectors.spans.mapping.document_attributes"
            reason += f"; no span holds an attribute of {key} {attributes}"
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


# --- mapping suggestions --------------------------------------------------------------------


def suggestions(
    mapped: Mapped, missing: Mapping[str, str]
) -> tuple[dict[str, Any], dict[str, list[str]]]:
    """``mapping:`` settings that fill missing fields, each kept only when mapping the
    trace again with it (and the ones kept before) fills them; extends the configured
    lists rather than replacing them, so nothing the mapping reads now is lost."""
    current = mapped.mapping.model_dump()
    accepted: dict[str, Any] = {}
    fills: dict[str, list[str]] = {}
    for key, found, fields in _candidates(mapped, missing):
        if key in accepted or key not in MappingConfig.model_fields:
            continue
        value = found
        if isinstance(current[key], list):
            if found in current[key]:
                continue
            value = [*current[key], found]
        try:
            trial = MappingConfig.model_validate({**current, **accepted, key: value})
        except ValueError:
            continue
        remapped = TraceMapper(trial).build(mapped.spans, "otlp")
        if remapped is not None and all(PRESENT[field](remapped) for field in fields):
            accepted[key] = value
            fills[key] = [field for field in missing if PRESENT[field](remapped)]
    return accepted, fills


def _candidates(
    mapped: Mapped, missing: Mapping[str, str]
) -> Iterator[tuple[str, Any, tuple[str, ...]]]:
    """(mapping key, value to add, the fields it should fill), likeliest first."""
    spans, trace, request = mapped.spans, mapped.trace, mapped.request
    ordered = [request, *sorted((s for s in spans if s is not request), key=lambda s: s.start_ns)]
    if "contexts" in missing:
        for name in _document_attributes(ordered):
            yield "document_attributes", name, ("contexts",)
    # The pointers apply to the request span's input and output, and to retrievers' input.
    retrievers = [span for span in ordered if mapped.kinds[span.span_id] == "RETRIEVER"]
    for field, which, keys, roles, read in (
        ("query", "input", _QUERY_KEYS, ("system", "assistant"), [request, *retrievers]),
        ("answer", "output", _ANSWER_KEYS, ("system", "user"), [request]),
    ):
        if field in missing:
            for span in read:
                document = parsed_json(span.attributes.get(f"{which}.value"))
                for pointer in _text_pointers(document, keys, roles):
                    yield f"{field}_pointers", pointer, (field,)
    if "retrieved_ids" in missing:
        for context in trace.contexts:
            if context.id_derived:
                for key, value in context.metadata.items():
                    if _names_source_id(key) and (isinstance(value, str | int)):
                        yield "doc_id_keys", key, ("retrieved_ids",)
    if "tenant" in missing:
        for key, value in trace.metadata.items():
            if any(word in key.lower() for word in _TENANT_WORDS) and isinstance(value, str):
                yield "tenant_metadata_key", key, ("tenant",)
    if stage_field("ttft") in missing:
        for span in ordered:
            for event in span.events:
                if _names_first_token(event.name):
                    yield "first_token_events", event.name, (stage_field("ttft"),)


def _document_attributes(spans: Sequence[Span]) -> Iterator[str]:
    """Attributes that look like a request's documents: a list of objects (JSON text or
    an OTLP array) with a text-like key, or an indexed family ``x.N.content``."""
    seen: set[str] = set()
    for span in spans:
        for name, value in span.attributes.items():
            if any(word in name for word in _MESSAGE_WORDS):
                continue
            family = _INDEXED.match(name)
            if family and family.group(3).rsplit(".", 1)[-1] in _TEXT_KEYS:
                candidate = family.group(1)
            elif _holds_documents(parsed_json(value)):
                candidate = name
            else:
                continue
            if candidate not in seen:
                seen.add(candidate)
                yield candidate


def _holds_documents(value: Any) -> bool:
    if not isinstance(value, list):
        return False
    objects = [item for item in value if isinstance(item, dict)]
    # objects with a role are chat messages
    return any(
        "role" not in item and any(isinstance(item.get(key), str) for key in _TEXT_KEYS)
        for item in objects
    )


def _text_pointers(
    document: Any, keys: frozenset[str], skipped_roles: tuple[str, ...]
) -> Iterator[str]:
    """JSON pointers to the text leaves of ``document`` under a key of ``keys`` (outside
    messages of ``skipped_roles``), in document order. A leaf under another key is never
    offered: any text would fill the field, so only the key's name says it is the one."""
    if not isinstance(document, dict | list):
        return
    leaves: list[str] = []
    stack: list[tuple[Any, str, str]] = [(document, "", "")]
    while stack:
        node, pointer, key = stack.pop()
        if isinstance(node, dict):
            if node.get("role") in skipped_roles:
                continue
            children = [(v, f"{pointer}/{escape_pointer(str(k))}", str(k)) for k, v in node.items()]
        elif isinstance(node, list):
            children = [(v, f"{pointer}/{i}", key) for i, v in enumerate(node)]
        else:
            if isinstance(node, str) and node.strip() and key.lower() in keys:
                leaves.append(pointer)
            continue
        stack.extend(reversed(children))
    yield from leaves


def _names_source_id(key: str) -> bool:
    lowered = key.lower()
    if lowered in ("chunk_id", "tenant", "id"):
        return False
    return lowered.endswith("id") or any(word in lowered for word in _SOURCE_ID_WORDS)


def _names_first_token(event: str) -> bool:
    lowered = event.lower()
    return "ttft" in lowered or ("first" in lowered and ("token" in lowered or "chunk" in lowered))
