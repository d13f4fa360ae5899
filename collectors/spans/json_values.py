"""Documents and token usage inside a span's JSON value, where ``mapping.json_documents``
and ``mapping.json_usage`` say (``collectors.spans.config``).

Dispatcher-style instrumentations (OpenLLMetry's LlamaIndex) write a call's arguments
and result whole as JSON: a retriever's documents as a list of JSON-encoded strings, an
LLM call's token counts inside the provider's raw response. A JSON pointer here reads
JSON text met on its way as JSON, at any depth. Nothing is read unless configured.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from collectors.spans.config import JsonDocumentsConfig, JsonUsageConfig
from collectors.spans.text import (
    at_pointer,
    count,
    decoded,
    json_object,
    number,
    parse_pointer,
    text,
)
from collectors.spans.usage import provider
from monitor.contract.trace import MAX_DOCUMENTS, Usage

Pointer = tuple[str, ...]


def pointer(text_pointer: str) -> Pointer:
    """A configured JSON pointer as its parts; ``""`` (the whole value) as none."""
    return parse_pointer(text_pointer) if text_pointer else ()


class JsonDocuments:
    """The documents a span lists in the JSON value of ``json_documents.attribute``, as
    the mapping's document dicts (``id``, ``content``, ``score``, ``metadata``)."""

    def __init__(self, config: JsonDocumentsConfig) -> None:
        self._attribute = config.attribute
        self._list = pointer(config.list_pointer)
        self._text = pointer(config.text_pointer)
        self._id = pointer(config.id_pointer) if config.id_pointer else None
        self._score = pointer(config.score_pointer) if config.score_pointer else None
        self._metadata = pointer(config.metadata_pointer) if config.metadata_pointer else None

    def __call__(self, attributes: Mapping[str, Any]) -> list[dict[str, Any]]:
        value = attributes.get(self._attribute)
        if value is None:
            return []
        listed = decoded(at_pointer(value, self._list))
        if not isinstance(listed, list):
            return []
        return [
            found for item in listed[:MAX_DOCUMENTS] if (found := self._document(item)) is not None
        ]

    def _document(self, item: Any) -> dict[str, Any] | None:
        document = decoded(item)
        content = text(at_pointer(document, self._text))
        own_id = at_pointer(document, self._id) if self._id is not None else None
        if content is None and own_id is None:
            return None
        return {
            "id": own_id,
            "content": content,
            "score": number(at_pointer(document, self._score)) if self._score else None,
            "metadata": json_object(at_pointer(document, self._metadata))
            if self._metadata is not None
            else {},
        }


class JsonUsage:
    """An LLM call's token counts in the JSON value of ``json_usage.attribute``."""

    def __init__(self, config: JsonUsageConfig) -> None:
        self._attribute = config.attribute
        self._input = pointer(config.input_tokens_pointer)
        self._output = pointer(config.output_tokens_pointer)
        self._model = pointer(config.model_pointer) if config.model_pointer else None

    def __call__(self, attributes: Mapping[str, Any], fallback: Usage) -> Usage:
        """The counts in the JSON value, with ``fallback``'s model (what the span's
        attributes name) unless the model pointer names one; ``fallback`` itself when
        the value holds no counts."""
        document = decoded(attributes.get(self._attribute))
        if document is None:
            return fallback
        prompt = count(at_pointer(document, self._input))
        completion = count(at_pointer(document, self._output))
        if not prompt and not completion:
            return fallback
        model = text(at_pointer(document, self._model)) if self._model is not None else None
        return Usage(
            model=model or fallback.model,
            provider=fallback.provider or provider(attributes),
            prompt_tokens=prompt,
            completion_tokens=completion,
        )
