"""The documents of retriever and reranker spans, wherever an instrumentation put them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collectors.otlp import DOCUMENT_KEYS, RETRIEVED_DOCUMENTS
from collectors.span_text import io_value, usable_id


def retrieved_documents(attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The retriever's documents: the OpenInference attributes, completed (or replaced)
    by the documents of its JSON ``output.value`` where those lack ids (LangChain)."""
    listed = documents(attributes, RETRIEVED_DOCUMENTS)
    usable = [doc for doc in listed if usable_id(doc.get("id"))]
    if listed and len(usable) == len(listed):
        return usable  # the common case
    if not listed or any("id" not in doc for doc in listed):
        _, output = io_value(attributes, "output")
        from_output = json_documents(output)
        if from_output:
            if len(from_output) == len(listed):
                listed = [
                    {**json_doc, **doc} for doc, json_doc in zip(listed, from_output, strict=True)
                ]
            else:
                listed = from_output
    return [doc for doc in listed if usable_id(doc.get("id"))]


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


def json_documents(document: Any) -> list[dict[str, Any]]:
    """Documents in a JSON output: a list of objects, or an object holding one under
    ``documents`` (LangChain) or ``nodes``; ``page_content``/``text`` count as content."""
    if isinstance(document, dict):
        document = document.get("documents", document.get("nodes"))
    if not isinstance(document, list):
        return []
    found = []
    for item in document:
        if not isinstance(item, dict):
            continue
        found.append({
            "id": item.get("id", item.get("id_")),
            "content": item.get("content", item.get("page_content", item.get("text"))),
            "score": item.get("score"),
            "metadata": item.get("metadata", item.get("meta")),
        })  # fmt: skip
    return found


def with_retrieved_fields(
    reranked: list[dict[str, Any]], retrieved: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Reranker outputs often keep only id, content and score (Haystack): the retriever
    document with the same id lends what is missing, its metadata (so its tenant) above all."""
    if not retrieved or all("metadata" in doc and "content" in doc for doc in reranked):
        return reranked
    by_id = {str(doc["id"]): doc for doc in retrieved}
    return [{**by_id.get(str(doc["id"]), {}), **doc} for doc in reranked]
