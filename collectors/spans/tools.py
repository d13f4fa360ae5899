"""Retrieval as a tool call: the documents an agent's retrieval tool returned.

Agents retrieve by calling a tool (GenAI ``execute_tool`` spans, OpenInference TOOL
spans, OpenLLMetry ``tool`` spans), often more than once per question. Such a call is a
retrieval step when its result is a list of documents: objects with a text under the
usual keys (``content``, ``text``, ``page_content``, ...), an id, score and metadata
optional, as JSON, JSON inside JSON strings, or wrapped the way frameworks return a
tool's output (a LangChain ``ToolMessage``'s content, a list of ``{"text": "<json>"}``
content parts). A result that is anything else (a number, a weather object, a row count,
free text) is no evidence, and the call no retrieval step.

``collectors.spans.mapping.retrieval_tools`` names the tools that retrieve (patterns of
the tool's name): then those, and only those, are retrieval steps, whatever their result
looks like.
"""

from __future__ import annotations

import itertools
import re
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from collectors.spans.documents import TEXT_KEYS, json_documents
from collectors.spans.span import Span
from collectors.spans.text import decoded, text, usable_text
from monitor.contract.trace import MAX_ID_LENGTH, ToolCall

# Where each convention puts a tool call's result, and its tool's name.
RESULT_ATTRIBUTES = ("gen_ai.tool.call.result", "output.value", "traceloop.entity.output")
NAME_ATTRIBUTES = ("gen_ai.tool.name", "tool.name", "traceloop.entity.name")
ARGUMENT_ATTRIBUTES = ("gen_ai.tool.call.arguments", "input.value", "traceloop.entity.input")
# The events that carry a tool call's result where no attribute does (strands-agents), and
# the attribute of each that holds it.
RESULT_EVENTS = {
    "gen_ai.choice": "message",
    "gen_ai.client.inference.operation.details": "gen_ai.output.messages",
}
# A document list sits near the top of a tool's result; past this, a result is data.
_MAX_DEPTH = 6
_MAX_ITEMS = 64  # of a list that is no document list, the items looked into
_MAX_NODES = 1_024  # objects and lists looked into in all: a result is no maze to walk


def tool_call(span: Span, documents: list[dict[str, Any]] | None) -> ToolCall:
    """The call as the trace keeps it: a retrieval step when ``documents`` is not None."""
    attributes = span.attributes
    arguments = next(
        (found for key in ARGUMENT_ATTRIBUTES if (found := usable_text(attributes.get(key)))),
        None,
    ) or next(  # the older GenAI event of the call's arguments
        (
            found
            for event in span.events
            if event.name == "gen_ai.tool.message"
            and (found := usable_text(event.attributes.get("content")))
        ),
        None,
    )
    return ToolCall(
        (tool_name(span) or "unnamed")[:MAX_ID_LENGTH],
        documents is not None,
        arguments,
        len(documents) if documents is not None else 0,
    )


def tool_name(span: Span) -> str:
    """The tool's name as its convention writes it, else the span's name."""
    attributes = span.attributes
    return next(
        (name for key in NAME_ATTRIBUTES if (name := text(attributes.get(key))) is not None),
        span.name,
    )


class RetrievalTools:
    """Which tool calls are retrieval steps, and their documents."""

    __slots__ = ("_named",)

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        self._named = (
            re.compile("|".join(f"(?:{p})" for p in patterns)).search if patterns else None
        )

    def documents(self, span: Span) -> list[dict[str, Any]] | None:
        """The documents of a tool call that retrieves (possibly none, for a named tool
        that found nothing), None for a call that is no retrieval step."""
        if self._named is not None and self._named(tool_name(span)) is None:
            return None
        attributes = span.attributes
        results = [attributes.get(attribute) for attribute in RESULT_ATTRIBUTES]
        # The GenAI events' forms: the result as the call's choice, or its output messages.
        results += [
            event.attributes.get(RESULT_EVENTS[event.name])
            for event in span.events
            if event.name in RESULT_EVENTS
        ]
        for result in results:
            found = _document_list(result)
            if found is not None:
                return json_documents(found)
        return [] if self._named is not None else None


def _document_list(result: Any) -> list[Any] | None:
    """The outermost list of document-shaped objects in a tool's result (breadth first),
    JSON text met on the way read as JSON; None past ``_MAX_NODES`` objects and lists
    looked into, so that a hostile result costs a bounded walk."""
    queue: deque[tuple[Any, int]] = deque([(result, 0)])
    for _ in range(_MAX_NODES):
        if not queue:
            return None
        node, depth = queue.popleft()
        node = decoded(node)
        if isinstance(node, list):
            if node and all(_is_document(item) for item in node):
                return node
            children: Iterable[Any] = node[:_MAX_ITEMS]
        elif isinstance(node, dict):
            children = itertools.islice(node.values(), _MAX_ITEMS)
        else:
            continue
        if depth < _MAX_DEPTH:
            queue.extend((child, depth + 1) for child in children)
    return None


def _is_document(item: Any) -> bool:
    """An object with a text under a text key that is no chat message (a role), no content
    part (``{"type": "text", ...}``) and no JSON of something else (a wrapper's text)."""
    if not isinstance(item, dict) or "role" in item or item.get("type") == "text":
        return False
    found = next((value for key in TEXT_KEYS if isinstance(value := item.get(key), str)), None)
    return bool(found and found.strip()) and decoded(found) is found
