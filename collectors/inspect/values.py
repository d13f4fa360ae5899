"""Every value the spans of one trace hold, and where (``rag-monitor inspect``): the places
``collectors.inspect.provenance`` names for each mapped value."""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collectors.inspect.missing import parsed_json
from collectors.inspect.shapes import escape_pointer
from collectors.spans.span import Span

_DIGITS = re.compile(r"(?<=[./])\d+(?=[./]|$)")


@dataclass(frozen=True, slots=True)
class Origin:
    """A place in a trace: a span's attribute (at a JSON pointer inside its value), a
    resource attribute, an event, the scope name or the span's times."""

    span: Span
    where: str  # attribute | resource | event | scope | times
    name: str = ""
    pointer: str = ""

    def as_json(self) -> dict[str, str]:
        out = {"span": self.span.name, "span_id": self.span.span_id, "scope": self.span.scope}
        out["in"] = self.where
        if self.name:
            out["name"] = self.name
        if self.pointer:
            out["pointer"] = self.pointer
        return out


class Values:
    """Every value the spans of one trace hold, to look mapped values up: strings and
    numbers wherever they sit (inside JSON text too), whole lists and objects by equality.
    The request span's come first, then the others by start time, as the mapper prefers."""

    def __init__(self, spans: Sequence[Span], request: Span) -> None:
        self._scalars: dict[Hashable, list[Origin]] = {}
        self._wholes: list[tuple[Any, Origin]] = []
        ordered = [request, *sorted((s for s in spans if s is not request), key=_start)]
        for span in ordered:
            for name, value in span.attributes.items():
                self._add(Origin(span, "attribute", name), value)
        # The mapping reads resource attributes of the request span only.
        for name, value in request.resource.items():
            self._add(Origin(request, "resource", name), value)

    def _add(self, origin: Origin, value: Any) -> None:
        key = _scalar_key(value)
        if key is not None:
            self._scalars.setdefault(key, []).append(origin)
        parsed = parsed_json(value)
        if not isinstance(parsed, list | dict):
            return
        self._wholes.append((_plain(parsed), origin))
        # Depth first, in document order; a stack, not recursion: JSON nests 1,024 deep.
        stack: list[tuple[Any, str]] = [(parsed, "")]
        while stack:
            node, pointer = stack.pop()
            if isinstance(node, dict):
                children = [(v, f"{pointer}/{escape_pointer(str(k))}") for k, v in node.items()]
            elif isinstance(node, list) and not _is_vector(node):
                children = [(v, f"{pointer}/{i}") for i, v in enumerate(node)]
            else:
                inner = parsed_json(node) if pointer else node
                if inner is not node:  # JSON text inside JSON (a tool message's content)
                    stack.append((inner, pointer))
                    continue
                key = _scalar_key(node) if pointer else None
                if key is not None:
                    at = Origin(origin.span, origin.where, origin.name, pointer)
                    self._scalars.setdefault(key, []).append(at)
                continue
            stack.extend(reversed(children))

    def find(
        self, value: Any, near: Origin | None = None, where: str | None = None
    ) -> list[Origin]:
        """Where ``value`` sits; the places closest to ``near`` first (same span, same
        attribute, longest common JSON pointer), then in the order the mapper prefers."""
        if isinstance(value, list | tuple | dict):
            plain = _plain(value)
            found = [origin for whole, origin in self._wholes if whole == plain]
        else:
            key = _scalar_key(value)
            found = list(self._scalars.get(key, ())) if key is not None else []
        if where is not None:
            found = [origin for origin in found if origin.where == where]
        if near is not None:
            found.sort(key=lambda origin: _distance(origin, near))
        return found

    def find_id(self, doc_id: str, near: Origin | None) -> list[Origin]:
        """A document id: as text, or as the integer a producer wrote."""
        found = self.find(doc_id, near)
        if not found and doc_id.isdecimal() and len(doc_id) < 19:
            found = self.find(int(doc_id), near)
        return found


def _start(span: Span) -> int:
    return span.start_ns


def _scalar_key(value: Any) -> Hashable | None:
    if isinstance(value, str):
        return value or None
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return ("number", float(value))
    return None


def _plain(value: Any) -> Any:
    """Tuples as lists, numbers as floats: what equality of JSON-like values needs."""
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, Mapping):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def _is_vector(node: list[Any]) -> bool:
    """A long list of numbers (an embedding): found as a whole, not element by element."""
    return len(node) > 16 and all(_scalar_key(item) is not None for item in node[:17])


def _distance(origin: Origin, near: Origin) -> tuple[bool, bool, int]:
    shared = 0
    for mine, theirs in zip(origin.pointer.split("/"), near.pointer.split("/"), strict=False):
        if mine != theirs:
            break
        shared += 1
    return origin.span is not near.span, origin.name != near.name, -shared


def indexed_family(origin: Origin) -> Origin:
    """The indexed family of a place: ``retrieval.documents.N.document.id``, ``/N/id``."""
    return Origin(
        origin.span, origin.where, _DIGITS.sub("N", origin.name), _DIGITS.sub("N", origin.pointer)
    )
