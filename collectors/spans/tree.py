"""The parent/child structure of one trace's spans.

A trace holds whatever its producer sent: a 45,000-span chain, each span the
parent of the next, once held the pipeline thread for 212 s because the
request-root search walked the parent chain again from every span. Every walk
here visits each span once, without recursion, so a deep chain costs steps
linear in its spans and cannot overflow the stack.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from collectors.spans.span import Span


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
    depth: dict[str, int] = {}
    for span in top_down(spans):
        parent = span.parent_span_id
        depth[span.span_id] = depth[parent] + 1 if parent is not None and parent in depth else 0
    return depth


def nearest_marked_ancestors(spans: Sequence[Span], marked: Collection[str]) -> dict[str, str]:
    """For each span below a ``marked`` span: the id of the nearest one above it, through
    spans that are not marked."""
    at_or_above: dict[str, str] = {}  # span id -> the nearest marked span, itself included
    nearest: dict[str, str] = {}
    for span in top_down(spans):
        parent = span.parent_span_id
        above = at_or_above.get(parent) if parent is not None else None
        if above is not None:
            nearest[span.span_id] = above
        if span.span_id in marked:
            at_or_above[span.span_id] = span.span_id
        elif above is not None:
            at_or_above[span.span_id] = above
    return nearest
