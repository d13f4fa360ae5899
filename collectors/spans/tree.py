"""One trace's spans as the mapping reads them: their kinds and their parent/child structure.

A trace holds whatever its producer sent: a 45,000-span chain, each span the
parent of the next, once held the pipeline thread for 212 s because the
request-root search walked the parent chain again from every span. Every walk
here visits each span once, without recursion, so a deep chain costs steps
linear in its spans and cannot overflow the stack; a ``SpanTree`` orders a
trace's spans once, however many of the mapping's readers walk its structure.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from collectors.spans.span import Span


class SpanTree:
    """One trace, made once by the mapping (``TraceMapper.tree``) and read by all its parts.

    ``spans`` keep their arrival order, the order in which readers report what they find;
    ``kinds`` holds each span's kind as the mapping sees it (span id -> kind, "" for none).
    The parent-first order and the depths are worked out when a reader first needs them
    (most traces need neither: one request span, no judge, no nested model call) and kept.
    """

    __slots__ = ("_depth", "_top_down", "kinds", "spans")

    def __init__(self, spans: Sequence[Span], kinds: dict[str, str]) -> None:
        self.spans = spans
        self.kinds = kinds
        self._top_down: list[Span] | None = None
        self._depth: dict[str, int] | None = None

    @property
    def top_down(self) -> list[Span]:
        """The spans, each held parent before its children (``top_down``)."""
        if self._top_down is None:
            self._top_down = top_down(self.spans)
        return self._top_down

    @property
    def depth(self) -> dict[str, int]:
        """Each span's number of held ancestors (``depths``)."""
        if self._depth is None:
            self._depth = _depths_in(self.top_down)
        return self._depth


def top_down(spans: Sequence[Span]) -> list[Span]:
    """The spans, each held parent before its children (breadth first from the spans whose
    parent is not held); spans on a parent cycle (bad input) come last, in arrival order."""
    held = {span.span_id for span in spans}
    order = [span for span in spans if span.parent_span_id not in held]
    children: dict[str, list[Span]] = {}
    for span in spans:
        parent = span.parent_span_id
        if parent is not None and parent in held:
            children.setdefault(parent, []).append(span)
    visited = 0
    while visited < len(order):  # ``order`` is its own queue
        order.extend(children.pop(order[visited].span_id, ()))
        visited += 1
    if len(order) < len(spans):
        placed = {id(span) for span in order}
        order.extend(span for span in spans if id(span) not in placed)
    return order


def depths(spans: Sequence[Span]) -> dict[str, int]:
    """Each span's number of held ancestors (0 for the root)."""
    return _depths_in(top_down(spans))


def nearest_marked_ancestors(spans: Sequence[Span], marked: Collection[str]) -> dict[str, str]:
    """For each span below a ``marked`` span: the id of the nearest one above it, through
    spans that are not marked; ``spans`` parent first (``SpanTree.top_down``)."""
    at_or_above: dict[str, str] = {}  # span id -> the nearest marked span, itself included
    nearest: dict[str, str] = {}
    for span in spans:
        parent = span.parent_span_id
        above = at_or_above.get(parent) if parent is not None else None
        if above is not None:
            nearest[span.span_id] = above
        if span.span_id in marked:
            at_or_above[span.span_id] = span.span_id
        elif above is not None:
            at_or_above[span.span_id] = above
    return nearest


def _depths_in(order: list[Span]) -> dict[str, int]:
    """``depths`` of spans given parent first."""
    depth: dict[str, int] = {}
    for span in order:
        parent = span.parent_span_id
        depth[span.span_id] = depth[parent] + 1 if parent is not None and parent in depth else 0
    return depth
