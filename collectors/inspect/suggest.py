"""The ``mapping:`` settings that would fill what a mapped trace lacks (``rag-monitor
inspect``).

A suggestion comes from where the value sits in the spans (documents under an attribute
the mapping does not know or inside a JSON value, token counts inside a raw response, a
query inside a JSON input, a tenant under another metadata key, the request span by its
name) and is kept only when mapping the trace again with it fills the field and leaves
every field that was there as it was.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from collectors.inspect.missing import Mapped, parsed_json
from collectors.inspect.shapes import (
    TEXT_KEYS,
    document_lists,
    escape_pointer,
    holds_documents,
    name_pattern,
    never_evidence,
    usage_objects,
)
from collectors.spans.config import MappingConfig
from collectors.spans.kinds import STAGE_OF_KIND
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span
from collectors.spans.text import io_value
from collectors.spans.tree import depths
from monitor.contract.field_presence import PRESENT, stage_field
from monitor.contract.trace import RagTrace

_TEXT_KEYS = frozenset(TEXT_KEYS)
# Words of an attribute that names what a retrieval returned: proposed before the others.
_RESULT_WORDS = ("result", "output", "document", "retriev")
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


Settings = dict[str, Any]
# A model call's token counts: coverage counts usage present for a rerank unit alone, but a
# request whose LLM calls report none is not priced.
_LLM_USAGE = "llm_usage"
_FILLED: dict[str, Callable[[RagTrace], bool]] = {
    **PRESENT,
    _LLM_USAGE: lambda trace: any(u.prompt_tokens or u.completion_tokens for u in trace.usage),
}


@dataclass(frozen=True, slots=True)
class Suggested:
    """What ``suggestions`` proposes: the ``mapping:`` settings, the fields each fills,
    and the documents, (id, text), each document setting (``document_setting``) filled in
    this trace (an id-less document's id is derived from its text)."""

    mapping: Settings
    fills: dict[str, list[str]]
    documents: dict[str, tuple[tuple[str, str | None], ...]]


def suggestions(
    mapped: Mapped, missing: Mapping[str, str], refused: Collection[str] = ()
) -> Suggested:
    """``mapping:`` settings that fill missing fields, each kept only when mapping the
    trace again with it (and the ones kept before) fills them and leaves every field that
    was there as it was; extends the configured lists and tables rather than replacing
    them, so nothing the mapping reads now is lost. A document setting among ``refused``
    (``constant_documents``) is never tried."""
    current = mapped.mapping.model_dump()
    accepted: Settings = {}
    fills: dict[str, list[str]] = {}
    documents: dict[str, tuple[tuple[str, str | None], ...]] = {}
    trace = mapped.trace  # as mapped with the settings accepted so far
    for settings, fields in _candidates(mapped, missing):
        if all(_FILLED[field](trace) for field in fields):
            continue  # filled by a setting accepted before
        named = [
            document_setting(key, value, current)
            for key, value in settings.items()
            if key in ("document_attributes", "json_documents")
        ]
        if any(setting in refused for setting in named):
            continue
        remapped, added = _tried(mapped.spans, current, accepted, settings)
        if (
            remapped is not None
            and all(_FILLED[field](remapped) for field in fields)
            and keeps_fields(trace, remapped)
        ):
            accepted.update(added)
            filled = [f for f in _FILLED if _FILLED[f](remapped) and not _FILLED[f](trace)]
            for key in added:
                fills[key] = sorted({"usage" if f == _LLM_USAGE else f for f in filled})
            for setting in named:
                documents[setting] = tuple(
                    (context.doc_id, context.text) for context in remapped.contexts
                )
            trace = remapped
    return Suggested(accepted, fills, documents)


def constant_documents(reports: Sequence[Settings]) -> dict[str, str]:
    """Of the document settings ``reports`` suggest (``inspect_trace``'s, one per trace,
    with the documents each setting filled under ``suggested_documents``), those that
    filled the same documents (ids and texts) in every trace, two traces or more, each
    (``document_setting``) with the reason: what does not change with the question is a
    prompt or a template, not what a retrieval returned, though it fills the field."""
    filled: dict[str, list[tuple[tuple[str, str | None], ...]]] = {}
    for report in reports:
        for setting, texts in report.get("suggested_documents", {}).items():
            filled.setdefault(setting, []).append(texts)
    return {
        setting: (
            f"{setting} not proposed: it gives the same {len(texts[0])} document(s) in all "
            f"{len(texts)} traces it fills (a prompt or a template, not what a retrieval "
            "returned)"
        )
        for setting, texts in filled.items()
        if len(texts) > 1 and len(set(texts)) == 1
    }


def document_setting(key: str, value: Any, current: Settings) -> str:
    """A document setting as one line: ``document_attributes x``, or ``json_documents
    {...}`` over the ``current`` section's values (as the suggestion writes it)."""
    if isinstance(value, str):
        return f"{key} {value}"
    return f"{key} {orjson.dumps({**current[key], **value}).decode()}"


def _tried(
    spans: Sequence[Span], current: Settings, accepted: Settings, settings: Settings
) -> tuple[RagTrace | None, Settings]:
    """The trace mapped again with ``settings`` added to the accepted ones, and what they
    add; (None, {}) when they add nothing or are no valid mapping."""
    base = {**current, **accepted}
    added: Settings = {}
    for key, found in settings.items():
        known = base.get(key)
        if isinstance(known, list):
            if found not in known:
                added[key] = [*known, found]
        elif isinstance(known, dict) and isinstance(found, dict):
            if not found.items() <= known.items():
                added[key] = {**known, **found}
        elif key not in accepted and known != found:
            added[key] = found
    if not added:
        return None, {}
    try:
        trial = MappingConfig.model_validate({**base, **added})
    except ValueError:
        return None, {}
    return TraceMapper(trial).build(spans, "otlp"), added


# What each field holds, to tell whether mapping again changed it (a context's id belongs
# to retrieved_ids, which a derived id leaves missing).
_FIELD_VALUES: dict[str, Callable[[RagTrace], Any]] = {
    "query": lambda trace: trace.query,
    "answer": lambda trace: trace.answer,
    "contexts": lambda trace: [context.text for context in trace.contexts],
    "retrieved_ids": lambda trace: trace.retrieved,
    "usage": lambda trace: trace.usage,
    "query_vector": lambda trace: trace.query_embedding,
    "tenant": lambda trace: trace.tenant,
}


def _field_value(name: str, trace: RagTrace) -> Any:
    if name.startswith("stage_"):
        return trace.stages.get(name.removeprefix("stage_"))
    return _FIELD_VALUES[name](trace)


def keeps_fields(before: RagTrace, after: RagTrace) -> bool:
    """Whether every field ``before`` carried is carried by ``after`` with the same value:
    a suggestion must never change a field that was right."""
    return all(
        present(after)
        and (
            _field_value(name, before) == _field_value(name, after)
            # another model's usage comes beside what was counted
            or (name == "usage" and set(before.usage) <= set(after.usage))
        )
        for name, present in PRESENT.items()
        if present(before)
    )


def request_suggestion(spans: Sequence[Span], mapping: MappingConfig) -> Settings:
    """For a trace that is no request: ``request_span_names`` for the shallowest span whose
    input holds a question and whose output holds an answer, with the JSON pointers to
    them; kept only when mapping again reads the trace as a request with both."""
    current = mapping.model_dump()
    depth = depths(spans)
    for span in sorted(spans, key=lambda s: (depth[s.span_id], s.start_ns)):
        plain_query, query_json = io_value(span.attributes, "input")
        plain_answer, answer_json = io_value(span.attributes, "output")
        queries = [None] if plain_query else list(_text_pointers(query_json, *_QUERY))
        answers = [None] if plain_answer else list(_text_pointers(answer_json, *_ANSWER))
        for query in queries[:1]:
            for answer in answers[:1]:
                settings: Settings = {"request_span_names": name_pattern(span.name)}
                if query is not None:
                    settings["query_pointers"] = query
                remapped, added = _tried(spans, current, {}, settings)
                if answer is not None and (remapped is None or not remapped.answer):
                    settings["answer_pointers"] = answer
                    remapped, added = _tried(spans, current, {}, settings)
                if remapped is not None and remapped.query and remapped.answer:
                    return added
    return {}


def _names_query(key: str) -> bool:
    # LlamaIndex names its question query_str, or str_or_query_bundle.
    return key in _QUERY_KEYS or "query" in key or "question" in key


def _names_answer(key: str) -> bool:
    return key in _ANSWER_KEYS


# What names a question or an answer in JSON, and the roles of messages never read for it.
_QUERY: tuple[Callable[[str], bool], tuple[str, ...]] = (_names_query, ("system", "assistant"))
_ANSWER: tuple[Callable[[str], bool], tuple[str, ...]] = (_names_answer, ("system", "user"))


def _candidates(
    mapped: Mapped, missing: Mapping[str, str]
) -> Iterator[tuple[Settings, tuple[str, ...]]]:
    """(settings to add, the fields they should fill), likeliest first."""
    spans, trace, request, kinds = mapped.spans, mapped.trace, mapped.request, mapped.kinds
    ordered = [request, *sorted((s for s in spans if s is not request), key=lambda s: s.start_ns)]
    if "contexts" in missing:
        for name in _document_attributes(ordered):
            yield {"document_attributes": name}, ("contexts",)
        yield from _json_candidates(
            ordered, kinds, document_lists, "RETRIEVER", key="json_documents", fields=("contexts",)
        )
    if not _FILLED[_LLM_USAGE](trace):
        yield from _json_candidates(
            ordered, kinds, usage_objects, "LLM", key="json_usage", fields=(_LLM_USAGE,)
        )
    # The pointers apply to the request span's input and output, and to retrievers' input.
    retrievers = [span for span in ordered if kinds[span.span_id] == "RETRIEVER"]
    for field, which, keys, read in (
        ("query", "input", _QUERY, [request, *retrievers]),
        ("answer", "output", _ANSWER, [request]),
    ):
        if field in missing:
            for span in read:
                _, document = io_value(span.attributes, which)
                for pointer in _text_pointers(document, *keys):
                    yield {f"{field}_pointers": pointer}, (field,)
    if "retrieved_ids" in missing:
        for context in trace.contexts:
            if context.id_derived:
                for key, value in context.metadata.items():
                    if _names_source_id(key) and (isinstance(value, str | int)):
                        yield {"doc_id_keys": key}, ("retrieved_ids",)
    if "tenant" in missing:
        for key, value in trace.metadata.items():
            if any(word in key.lower() for word in _TENANT_WORDS) and isinstance(value, str):
                yield {"tenant_metadata_key": key}, ("tenant",)
    if stage_field("ttft") in missing:
        for span in ordered:
            for event in span.events:
                if _names_first_token(event.name):
                    yield {"first_token_events": event.name}, (stage_field("ttft"),)


def _json_candidates(
    spans: Sequence[Span],
    kinds: Mapping[str, str],
    found_in: Callable[[Span], Iterator[dict[str, str]]],
    kind: str,
    *,
    key: str,
    fields: tuple[str, ...],
) -> Iterator[tuple[Settings, tuple[str, ...]]]:
    """A JSON setting for each shape ``found_in`` finds in a span of ``kind`` or of none,
    with the span's kind by its name for the latter (the stage it stands for too)."""
    for span in spans:
        span_kind = kinds[span.span_id]
        if span_kind not in ("", kind):
            continue
        for found in found_in(span):
            settings: Settings = {key: found}
            if not span_kind:
                settings["span_kind_names"] = {name_pattern(span.name): kind}
                yield settings, (*fields, stage_field(STAGE_OF_KIND[kind]))
            else:
                yield settings, fields


def _document_attributes(spans: Sequence[Span]) -> Iterator[str]:
    """Attributes that look like a request's documents: a list of objects (JSON text or
    an OTLP array) with a text-like key, or an indexed family ``x.N.content``; never one
    that holds what went into a call (``shapes.never_evidence``). Those named like a
    result (a tool's result, a step's output) come first."""
    found: list[str] = []
    for span in spans:
        for name, value in span.attributes.items():
            if never_evidence(name):
                continue
            family = _INDEXED.match(name)
            if family and family.group(3).rsplit(".", 1)[-1] in _TEXT_KEYS:
                candidate = family.group(1)
            elif holds_documents(parsed_json(value)):
                candidate = name
            else:
                continue
            if candidate not in found:
                found.append(candidate)
    yield from sorted(found, key=lambda name: not any(w in name.lower() for w in _RESULT_WORDS))


def _text_pointers(
    document: Any, names: Callable[[str], bool], skipped_roles: tuple[str, ...]
) -> Iterator[str]:
    """JSON pointers to the text leaves of ``document`` under a key ``names`` accepts (outside
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
            if isinstance(node, str) and node.strip() and names(key.lower()):
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
