"""Spans known by their names, where no convention says what they are
(``mapping.span_kind_names``, ``mapping.request_span_names``).

Dispatcher-style instrumentations write one span per framework call, named after the
class (``VectorIndexRetriever.task``), with no kind: only the name tells the retriever.
A class's public method dispatches its private one under the same name, so of nested
calls that match the same kind only the innermost, the one that did the work, gets it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from collectors.spans.span import Span
from collectors.spans.tree import SpanTree, nearest_marked_ancestors


class SpanNames:
    """Kinds and request spans by span name; build only when some pattern is set."""

    def __init__(self, kind_names: Mapping[str, str], request_names: Sequence[str]) -> None:
        self._kinds = [(re.compile(pattern).search, kind) for pattern, kind in kind_names.items()]
        self._request: Callable[[str], object] | None = (
            re.compile("|".join(f"(?:{pattern})" for pattern in request_names)).search
            if request_names
            else None
        )

    def add_kinds(self, tree: SpanTree) -> None:
        """Give spans of no kind the kind of the first pattern their name matches, except
        a span around a nested match of the same kind."""
        if not self._kinds:
            return
        kinds = tree.kinds
        named: dict[str, str] = {}
        for span in tree.spans:
            if not kinds[span.span_id]:
                kind = next((kind for search, kind in self._kinds if search(span.name)), None)
                if kind is not None:
                    named[span.span_id] = kind
        if not named:
            return
        wrappers = set()
        if len(named) > 1:
            for span_id, above in nearest_marked_ancestors(tree.top_down, named.keys()).items():
                if span_id in named and named[above] == named[span_id]:
                    wrappers.add(above)
        for span_id, kind in named.items():
            if span_id not in wrappers:
                kinds[span_id] = kind

    def request_spans(self, spans: Sequence[Span]) -> list[Span]:
        """The spans whose names match ``request_span_names``: the shallowest stands for the
        request (``collectors.spans.openinference``)."""
        if self._request is None:
            return []
        return [span for span in spans if self._request(span.name)]
