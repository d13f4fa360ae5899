"""A trace's ``SpanTree``: its spans are ordered once, when a part of the mapping first
needs their structure, whichever parts read it after."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from collectors.spans import tree as tree_module
from collectors.spans.config import MappingConfig
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span
from collectors.spans.tree import SpanTree, depths, top_down
from tests.unit.collectors.spans.test_openinference import rag_spans, span


@pytest.fixture
def orderings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The span counts of every parent-first ordering made while the test runs."""
    made: list[int] = []

    def counted(spans: Sequence[Span]) -> list[Span]:
        made.append(len(spans))
        return top_down(spans)

    monkeypatch.setattr(tree_module, "top_down", counted)
    return made


def test_every_reader_of_a_trace_shares_one_ordering(orderings: list[int]) -> None:
    """Name kinds around nested matches, two request spans by name, a judge over a model
    call and a wrapper around a nested call each need the structure: it is made once."""
    mapper = TraceMapper(MappingConfig(
        span_kind_names={"Retriever": "RETRIEVER"}, request_span_names=["^query"],
    ))  # fmt: skip
    spans = [
        # Both named as a request: the shallower is the request span.
        replace(span("q2", "q1", None, 1100, 1900), name="query.inner"),
        replace(span("q1", None, None, 1000, 2000, **{"input.value": "q?"}), name="query"),
        # A retriever's public method around its private one: the inner one retrieves.
        replace(span("r1", "q2", None, 1110, 1190), name="VectorRetriever.retrieve"),
        replace(span("r2", "r1", None, 1120, 1180), name="VectorRetriever._retrieve"),
        span("e1", "q2", "EVALUATOR", 1800, 1890),
        span("j1", "e1", "LLM", 1810, 1880, **{"llm.token_count.prompt": 40}),
        span("p1", "q2", "LLM", 1200, 1700, **{"llm.token_count.prompt": 7}),  # a wrapper ...
        span("c1", "p1", "LLM", 1210, 1690, **{"llm.token_count.prompt": 7}),  # ... of this call
    ]
    trace = mapper.build(spans, "otlp")
    assert orderings == [len(spans)]
    assert trace is not None
    assert trace.root_span_id == spans[1].span_id
    assert [usage.prompt_tokens for usage in trace.usage] == [7, 40]  # the wrapper not again
    kinds = mapper.tree(spans).kinds
    assert (kinds[spans[2].span_id], kinds[spans[3].span_id]) == ("", "RETRIEVER")


def test_a_plain_request_is_never_ordered(orderings: list[int]) -> None:
    """One request span, no judge, no nested model call: no reader asks for the structure."""
    assert TraceMapper().build(rag_spans(), "otlp") is not None
    assert orderings == []


def test_a_tree_keeps_its_order_and_depths() -> None:
    """The depths a tree works out are those of its spans, in any order, and it keeps them."""
    spans = [
        span("c2", "c1", None, 1, 2), span("c1", "c2", None, 1, 2),  # a cycle: bad input
        span("b1", "a1", None, 1, 2), span("x1", "gone", None, 1, 2), span("a1", None, None, 1, 2),
    ]  # fmt: skip
    tree = SpanTree(spans, {s.span_id: "" for s in spans})
    assert tree.depth == depths(spans)
    assert tree.depth is tree.depth
    assert tree.top_down is tree.top_down
    assert [s.span_id[:2] for s in tree.top_down] == ["x1", "a1", "b1", "c2", "c1"]
