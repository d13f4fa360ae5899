"""Typed values and text read out of span attributes.

Attributes of an unexpected type read as absent rather than trusted: a
producer's typo must not crash a detector. Text that frameworks trace in
place of a value (a generator's repr, a JSON dump) is never taken for text.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from collectors.spans.span import FiniteFloats, SpanEvent

# A tuple, not ``int | float``: that expression builds a union object on every
# call, and these checks run for every document of every trace.
_NUMBER_TYPES = (int, float)
# What a framework writes when it traces a lazy value instead of the text.
_NOT_TEXT_PREFIXES = ("<generator object", "<async_generator object", "<coroutine object")


def io_value(attributes: Mapping[str, Any], which: str) -> tuple[str | None, Any]:
    """``input``/``output``: (the value when it is plain text, else None; its parsed JSON).

    OpenInference's ``input.value``, else OpenLLMetry's ``traceloop.entity.input``."""
    value = attributes.get(f"{which}.value")
    if not isinstance(value, str) or not value:
        return _traceloop_entity(attributes, which)
    mime = attributes.get(f"{which}.mime_type")
    if mime == "text/plain":
        return usable_text(value), None
    if mime is None and value[0] not in "[{":
        return usable_text(value), None
    try:
        return None, orjson.loads(value)
    except orjson.JSONDecodeError:
        return (usable_text(value) if mime is None else None), None


def _traceloop_entity(attributes: Mapping[str, Any], which: str) -> tuple[str | None, Any]:
    """OpenLLMetry's JSON ``traceloop.entity.input``/``output``: a chain's value is wrapped
    as ``{"inputs": ..., "tags": ...}`` / ``{"outputs": ..., "kwargs": ...}``, unwrapped here so
    that a string is plain text and an object meets the JSON pointers as the chain got it;
    other entities (a retriever's ``{"query": ..., "documents": ...}``) stay whole."""
    document = json_object(attributes.get(f"traceloop.entity.{which}"))
    if not document:
        return None, None
    wrapped = document.get(f"{which}s", document)
    if isinstance(wrapped, str):
        return usable_text(wrapped), None
    return None, wrapped


def usable_text(value: Any) -> str | None:
    """``value`` when it is text, not the repr of a generator a framework had not read yet."""
    if not isinstance(value, str) or not value or value.startswith(_NOT_TEXT_PREFIXES):
        return None
    return value


def parse_pointer(pointer: str) -> tuple[str, ...]:
    return tuple(part.replace("~1", "/").replace("~0", "~") for part in pointer[1:].split("/"))


def decoded(value: Any) -> Any:
    """JSON text as the value it encodes; anything else as it is."""
    if isinstance(value, str) and value[:1] in ("{", "[", '"'):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def at_pointer(value: Any, pointer: Sequence[str]) -> Any:
    """The value the parsed JSON pointer leads to in ``value``, JSON text met on the way
    read as JSON (a list of JSON strings, a response serialised into a string); None when
    it leads nowhere. The value it leads to is returned as it is."""
    node = value
    for part in pointer:
        if isinstance(node, str):
            node = decoded(node)
        if isinstance(node, dict):
            node = node.get(part)
        elif isinstance(node, list) and part.isdecimal() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def first_pointer(document: Any, pointers: Sequence[tuple[str, ...]]) -> str | None:
    if document is None:
        return None
    for pointer in pointers:
        found = usable_text(at_pointer(document, pointer))
        if found is not None:
            return found
    return None


def last_user_message(attributes: Mapping[str, Any]) -> str | None:
    """The last ``user`` message an LLM span was given (OpenInference, GenAI, or OpenLLMetry's
    indexed prompts)."""
    found = _last_indexed_user(attributes, "llm.input_messages.{}.message.")
    if found is not None:
        return found
    for message in reversed(json_list(attributes.get("gen_ai.input.messages"))):
        if isinstance(message, dict) and message.get("role") == "user":
            return message_text(message)
    # OpenLLMetry before its GenAI messages (opentelemetry-instrumentation-* up to 0.54).
    return _last_indexed_user(attributes, "gen_ai.prompt.{}.")


def _last_indexed_user(attributes: Mapping[str, Any], prefix: str) -> str | None:
    """The content of the last ``user`` message of an indexed family (``prefix`` with ``{}``
    for the index, followed by ``role`` and ``content``)."""
    found = None
    index = 0
    while (role := attributes.get(prefix.format(index) + "role")) is not None:
        if role == "user":
            found = usable_text(attributes.get(prefix.format(index) + "content"))
        index += 1
    return found


def generated_text(attributes: Mapping[str, Any]) -> str | None:
    """The text an LLM span produced: output messages (OpenInference, GenAI, OpenLLMetry's
    indexed completions), else a plain-text ``output.value``."""
    found = usable_text(attributes.get("llm.output_messages.0.message.content"))
    if found is not None:
        return found
    for message in json_list(attributes.get("gen_ai.output.messages")):
        if isinstance(message, dict):
            found = message_text(message)
            if found is not None:
                return found
    found = usable_text(attributes.get("gen_ai.completion.0.content"))  # OpenLLMetry <= 0.54
    if found is not None:
        return found
    plain, _ = io_value(attributes, "output")
    return plain


# The GenAI conventions' event of a model call's details (their latest form): its
# attributes are the message attributes a span would otherwise carry.
_DETAILS_EVENT = "gen_ai.client.inference.operation.details"
_MESSAGE_ATTRIBUTES = ("gen_ai.input.messages", "gen_ai.output.messages")


def event_text(found: str | None) -> str | None:
    """A question or an answer read from events, without the white space around it
    (strands-agents ends an agent's answer with a newline of its own)."""
    return usable_text(found.strip()) if found is not None else None


def event_messages(events: Sequence[SpanEvent]) -> dict[str, Any]:
    """The messages a span's events carry, as the GenAI message attributes
    (``gen_ai.input.messages``, ``gen_ai.output.messages``) that ``last_user_message`` and
    ``generated_text`` read: the details event holds them as they are; the older events
    hold one message each (``gen_ai.user.message``'s ``content``, ``gen_ai.choice``'s
    ``message``: text, or a list of ``{"text": ...}`` parts as strands-agents writes it)."""
    found: dict[str, Any] = {}
    older: dict[str, list[dict[str, str]]] = {key: [] for key in _MESSAGE_ATTRIBUTES}
    for event in events:
        attributes = event.attributes
        if event.name == _DETAILS_EVENT:
            found.update((key, attributes[key]) for key in _MESSAGE_ATTRIBUTES if key in attributes)
        elif event.name == "gen_ai.user.message":
            said = _parts_text(attributes.get("content"))
            if said is not None:
                older["gen_ai.input.messages"].append({"role": "user", "content": said})
        elif event.name == "gen_ai.choice":
            said = _parts_text(attributes.get("message"))
            if said is not None:
                older["gen_ai.output.messages"].append({"role": "assistant", "content": said})
    for key, messages in older.items():
        if messages and key not in found:
            found[key] = messages
    return found


def _parts_text(value: Any) -> str | None:
    """A message's text: plain text, or the texts of a JSON list of ``{"text": ...}`` parts
    joined (None when no part is text: a tool call)."""
    parts = decoded(value)
    if isinstance(parts, list):
        value = "".join(
            part["text"]
            for part in parts
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return usable_text(value)


def message_text(message: Mapping[str, Any]) -> str | None:
    """Text of a GenAI message: its text ``parts`` joined, or a plain ``content``."""
    parts = message.get("parts")
    if isinstance(parts, list):
        texts = [
            part["content"]
            for part in parts
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("content"), str)
        ]
        return usable_text("".join(texts))
    return usable_text(message.get("content"))


def text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def text_list(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):  # a producer that could not write a list attribute
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            value = [value]
    if not isinstance(value, list):
        return ()
    return tuple(str(item) for item in value if isinstance(item, str | int))


def number(value: Any) -> float | None:
    if isinstance(value, _NUMBER_TYPES) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def vector(value: Any) -> tuple[float, ...] | None:
    if type(value) is FiniteFloats:  # decoded and checked as a whole
        return tuple(value)
    if isinstance(value, list) and value and all(number(item) is not None for item in value):
        return tuple(float(item) for item in value)
    return None


def json_object(value: Any) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def json_list(value: Any) -> list[Any]:
    if isinstance(value, list):
        return value
    if isinstance(value, str):
        try:
            parsed = orjson.loads(value)
        except orjson.JSONDecodeError:
            return []
        return parsed if isinstance(parsed, list) else []
    return []


def usable_id(value: Any) -> bool:
    # Exact types: decoded attributes and JSON are never subclasses, and bool is not int here.
    kind = type(value)
    return kind is int or (kind is str and value != "")
