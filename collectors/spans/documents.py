"""The documents of retriever and reranker spans, wherever an instrumentation put them.

A document here is a dict of ``id``, ``content``, ``score`` and ``metadata``, any of them
possibly missing: which documents count, and under which id, the mapping decides.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from collectors.spans.span import DOCUMENT_KEYS, RETRIEVED_DOCUMENTS
from collectors.spans.text import io_value, json_list, json_object, text, usable_id

GEN_AI_DOCUMENTS = "gen_ai.retrieval.documents"
_DATA_SOURCE = "gen_ai.data_source.id"
# The document metadata key that keeps the retrieval span's gen_ai.data_source.id.
DATA_SOURCE_KEY = "data_source_id"
# Keys whose string value is a document's text in a JSON document, in order.
TEXT_KEYS = ("content", "page_content", "text", "chunk", "passage", "document")
_FIELD_KEYS = frozenset({"id", "id_", "score", "metadata", "meta", *TEXT_KEYS})
# The first fields of an indexed family ``name.0.<field>`` probed before a scan of all names.
_FAMILY_PROBES = ("id", "content", "text", "page_content", "document.id", "document.content")


def retrieved_documents(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The retriever's documents: the OpenInference attributes, completed (or replaced)
    by the documents of its JSON output where those lack ids (LangChain; OpenLLMetry's
    ``traceloop.entity.output``), else the GenAI conventions' ``gen_ai.retrieval.documents``.
    A ``gen_ai.data_source.id`` on the span goes into each document's metadata."""
    listed = documents(attributes, RETRIEVED_DOCUMENTS)
    if listed and all(usable_id(doc.get("id")) for doc in listed):
        found = listed  # the common case
    else:
        found = _completed(listed, attributes) or json_documents(
            json_list(attributes.get(GEN_AI_DOCUMENTS))
        )
    source = text(attributes.get(_DATA_SOURCE))
    return found if source is None else [_with_data_source(doc, source) for doc in found]


def _completed(listed: list[dict[str, Any]], attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Attribute documents without ids take them from the JSON output's documents, merged
    field by field when both list as many; an output with another count replaces them."""
    if listed and all("id" in doc for doc in listed):
        return listed
    _, output = io_value(attributes, "output")
    from_output = json_documents(output)
    if not from_output:
        return listed
    if len(from_output) != len(listed):
        return from_output
    return [{**json_doc, **doc} for doc, json_doc in zip(listed, from_output, strict=True)]


def _with_data_source(doc: dict[str, Any], source: str) -> dict[str, Any]:
    metadata = json_object(doc.get("metadata"))
    if DATA_SOURCE_KEY in metadata:
        return doc
    return {**doc, "metadata": {**metadata, DATA_SOURCE_KEY: source}}


def documents(attributes: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """The fields (``id``, ``content``, ...) of each listed document, in order, usable id
    or not."""
    fields: dict[int, dict[str, Any]] = {}
    for key, value in attributes.items():
        # One cached lookup per name instead of a prefix test and a lookup.
        document = DOCUMENT_KEYS[key]
        if document is not None:
            of, index, name = document
            if name and of == prefix:
                if index in fields:  # no empty dict built for every field, as setdefault would
                    fields[index][name] = value
                else:
                    fields[index] = {name: value}
    return [fields[index] for index in sorted(fields)]


def attribute_documents(attributes: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """Documents a span holds under the attribute ``name``
    (``collectors.spans.mapping.document_attributes``): a list of objects, as JSON text or
    an OTLP array, or an indexed family of attributes ``name.N.<field>``
    (``name.N.document.<field>`` too)."""
    value = attributes.get(name)
    if value is not None:
        return json_documents(json_list(value))
    if not holds_documents(attributes, name):
        return []
    prefix = name + "."
    fields: dict[int, dict[str, Any]] = {}
    for key, field_value in attributes.items():
        if key.startswith(prefix):
            index, _, field = key[len(prefix) :].partition(".")
            # Past 9 digits an index is over any document limit (see collectors/otlp/decode.py).
            if index.isdecimal() and len(index) <= 9 and field:
                fields.setdefault(int(index), {})[field.removeprefix("document.")] = field_value
    return json_documents([fields[index] for index in sorted(fields)])


def holds_documents(attributes: Mapping[str, Any], name: str) -> bool:
    """Whether a span holds anything under the document attribute ``name``, without
    reading it."""
    return name in attributes or any(f"{name}.0.{probe}" in attributes for probe in _FAMILY_PROBES)


def json_documents(document: Any) -> list[dict[str, Any]]:
    """Documents in a JSON output: a list of objects, or an object holding one under
    ``documents`` (LangChain, OpenLLMetry) or ``nodes``. The text is the first string of
    ``content``, ``page_content``, ``text``, ``chunk``, ``passage``, ``document``; an object
    wrapped as ``{"document": {...}}`` is read inside; an object without ``metadata`` has
    its other keys as metadata (the GenAI conventions allow any key beside id and score)."""
    if isinstance(document, dict):
        document = document.get("documents", document.get("nodes"))
    if not isinstance(document, list):
        return []
    found = []
    for listed in document:
        if not isinstance(listed, dict):
            continue
        inner = listed.get("document")
        item = inner if isinstance(inner, dict) else listed
        metadata = item.get("metadata", item.get("meta"))
        if metadata is None:
            metadata = {key: value for key, value in item.items() if key not in _FIELD_KEYS}
        found.append({
            "id": item.get("id", item.get("id_")),
            "content": next((v for key in TEXT_KEYS if isinstance(v := item.get(key), str)), None),
            "score": item.get("score"),
            "metadata": metadata,
        })  # fmt: skip
    return found


def with_retrieved_fields(
    reranked: list[dict[str, Any]], retrieved: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Reranker outputs often keep only id, content and score (Haystack): the retriever
    document with the same id (without one: the same text) lends what is missing, its
    metadata (so its tenant) above all."""
    if not retrieved or all("metadata" in doc and "content" in doc for doc in reranked):
        return reranked
    by_id = {str(doc["id"]): doc for doc in retrieved if usable_id(doc.get("id"))}
    by_text = {doc["content"]: doc for doc in retrieved if isinstance(doc.get("content"), str)}
    lent = []
    for doc in reranked:
        key = doc.get("id")
        same = by_id.get(str(key)) if usable_id(key) else by_text.get(doc.get("content"))
        lent.append(doc if same is None else {**same, **_present(doc)})
    return lent


def _present(doc: dict[str, Any]) -> dict[str, Any]:
    """The fields of ``doc`` that hold a value (a JSON document lists ``"id": None``)."""
    return {key: value for key, value in doc.items() if value is not None}


def derived_id(content: str) -> str:
    """The id of a document its producer gave none: ``sha256:`` and the first 16 hex digits
    of its text's SHA-256, so the same text gets the same id in every trace."""
    return "sha256:" + hashlib.sha256(content.encode()).hexdigest()[:16]
