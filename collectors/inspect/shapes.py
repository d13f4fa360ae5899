"""Document lists, token usage and question/answer texts found by their shape in the JSON
values of spans (``rag-monitor inspect``), JSON encoded inside JSON strings included.

Each finding is a ``mapping:`` setting to try (``collectors.inspect.suggest`` keeps it
only when mapping the trace again with it fills the field and changes no field that was
there): ``json_documents`` for a list of objects with a text, ``json_usage`` for an
object of input and output token counts, with ``span_kind_names`` for the span holding
either when no convention gives it a kind.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from collectors.spans.span import Span
from collectors.spans.text import decoded

# Keys whose value reads as a document's text, in a list of objects or an indexed family.
TEXT_KEYS = ("content", "text", "page_content", "document", "chunk", "passage")
# Attributes that hold what went into a call, never what a retrieval returned: system
# instructions, prompts and templates, chat messages, tool arguments, a span's input. A
# list of texts there fits the shape of documents and fills the field, and is wrong: the
# judge would score answers against the prompt (gen_ai.system_instructions, say).
_NOT_EVIDENCE = re.compile(
    r"instruction|prompt|template|message|completion|argument|(^|[._])input([._]|$)"
)

_ID_KEYS = ("id", "id_", "node_id", "doc_id", "document_id", "chunk_id", "uuid")
_SCORE_KEYS = ("score", "similarity", "relevance_score", "distance")
_METADATA_KEYS = ("metadata", "meta", "payload")
_MODEL_KEYS = ("model", "model_name")
# Names of an object's input and output token counts, by provider.
_TOKEN_PAIRS = (
    ("prompt_tokens", "completion_tokens"),
    ("input_tokens", "output_tokens"),
    ("prompt_token_count", "candidates_token_count"),
)
_MAX_DEPTH = 12  # a document or a usage object sits near the top of a call's JSON


def never_evidence(attribute: str) -> bool:
    """Whether the attribute named ``attribute`` holds what went into a call (instructions,
    a prompt, messages, tool arguments, an input), never retrieved documents."""
    return _NOT_EVIDENCE.search(attribute.lower()) is not None


def holds_documents(value: Any) -> bool:
    """Whether ``value`` is a list with an object that has a text under a text key and no
    role (an object with a role is a chat message)."""
    if not isinstance(value, list):
        return False
    return any(
        isinstance(item, dict)
        and "role" not in item
        and any(isinstance(item.get(key), str) for key in TEXT_KEYS)
        for item in value
    )


def escape_pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def name_pattern(name: str) -> str:
    """The regular expression matching exactly the span name ``name``."""
    return f"^{re.escape(name)}$"


def json_values(span: Span) -> Iterator[tuple[str, Any]]:
    """(attribute, decoded value) for each attribute holding a JSON object or list."""
    for name, value in span.attributes.items():
        found = decoded(value)
        if isinstance(found, dict | list):
            yield name, found


def _walk(value: Any, pointer: str = "", depth: int = 0) -> Iterator[tuple[str, Any]]:
    """(pointer, node) for every object and list in ``value``, outermost first, JSON
    text decoded on the way."""
    node = decoded(value)
    if not isinstance(node, dict | list) or depth > _MAX_DEPTH:
        return
    yield pointer, node
    items = node.items() if isinstance(node, dict) else enumerate(node)
    for key, child in items:
        yield from _walk(child, f"{pointer}/{escape_pointer(str(key))}", depth + 1)


def _child_pointer(
    node: dict[str, Any], keys: tuple[str, ...], kinds: type | tuple[type, ...]
) -> str:
    key = next((key for key in keys if isinstance(node.get(key), kinds)), None)
    return "" if key is None else f"/{escape_pointer(key)}"


def _document_pointers(item: Any) -> dict[str, str] | None:
    """The pointers to a document's text, id, score and metadata, inside one list item:
    the text is the shallowest string under a text key; id and metadata sit beside it."""
    for pointer, node in _walk(item):
        if not isinstance(node, dict) or "role" in node:  # a role: a chat message
            continue
        text_key = next((key for key in TEXT_KEYS if isinstance(node.get(key), str)), None)
        if text_key is None:
            continue
        found = {"text_pointer": f"{pointer}/{escape_pointer(text_key)}"}
        for field, keys, kinds in (
            ("id_pointer", _ID_KEYS, (str, int)),
            ("metadata_pointer", _METADATA_KEYS, (dict, str)),
        ):
            beside = _child_pointer(node, keys, kinds)
            if beside:
                found[field] = pointer + beside
        top = decoded(item)
        score = _child_pointer(top, _SCORE_KEYS, (int, float)) if isinstance(top, dict) else ""
        if not score:
            score = _child_pointer(node, _SCORE_KEYS, (int, float))
            score = pointer + score if score else ""
        if score:
            found["score_pointer"] = score
        return found
    return None


def document_lists(span: Span) -> Iterator[dict[str, str]]:
    """``json_documents`` settings for each list of documents in the span's JSON values,
    outside the attributes that are never evidence."""
    for attribute, value in json_values(span):
        if never_evidence(attribute):
            continue
        for pointer, node in _walk(value):
            if not isinstance(node, list) or not node:
                continue
            pointers = _document_pointers(node[0])
            if pointers is not None and all(_document_pointers(item) == pointers for item in node):
                yield {"attribute": attribute, "list_pointer": pointer, **pointers}


def usage_objects(span: Span) -> Iterator[dict[str, str]]:
    """``json_usage`` settings for each object of token counts in the span's JSON values;
    the model is the nearest string under a model key on the way to it."""
    for attribute, value in json_values(span):
        models: dict[str, str] = {}
        for pointer, node in _walk(value):
            if not isinstance(node, dict):
                continue
            model_key = next((k for k in _MODEL_KEYS if isinstance(node.get(k), str)), None)
            if model_key is not None:
                models[pointer] = f"{pointer}/{model_key}"
            for prompt, completion in _TOKEN_PAIRS:
                if _is_count(node.get(prompt)) and _is_count(node.get(completion)):
                    found = {
                        "attribute": attribute,
                        "input_tokens_pointer": f"{pointer}/{prompt}",
                        "output_tokens_pointer": f"{pointer}/{completion}",
                    }
                    model = _nearest(models, pointer)
                    if model is not None:
                        found["model_pointer"] = model
                    yield found
                    break


def _nearest(found: Mapping[str, str], pointer: str) -> str | None:
    """The value for the longest prefix of ``pointer`` among ``found``'s keys."""
    while True:
        if pointer in found:
            return found[pointer]
        if not pointer:
            return None
        pointer = pointer.rsplit("/", 1)[0]


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0
