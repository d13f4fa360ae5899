"""Token usage of LLM, embedding and reranker spans, each model call counted once."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from collectors.spans.span import Span
from collectors.spans.text import count, text
from collectors.spans.tree import SpanTree, nearest_marked_ancestors
from monitor.contract.trace import Usage


def calls_counted_once(generations: Sequence[Span], tree: SpanTree) -> Sequence[Span]:
    """The generation spans whose usage counts: a wrapper span (LlamaIndex ``predict``
    around ``complete``) whose token counts equal the sum of its nested generation
    spans' reports the same calls again, so only the nested spans count."""
    if len(generations) < 2:
        return generations
    # The nearest generation ancestor, through spans of other kinds.
    nearest = nearest_marked_ancestors(tree.top_down, {span.span_id for span in generations})
    nested: dict[str, list[Span]] = {}
    for span in generations:
        parent = nearest.get(span.span_id)
        if parent is not None:
            nested.setdefault(parent, []).append(span)
    counted = []
    for span in generations:
        children = nested.get(span.span_id)
        if children and _tokens(span) == tuple(map(sum, zip(*map(_tokens, children), strict=True))):
            continue
        counted.append(span)
    return counted


def _tokens(span: Span) -> tuple[int, int]:
    usage = llm_usage(span.attributes)
    return usage.prompt_tokens, usage.completion_tokens


def llm_usage(attributes: Mapping[str, Any]) -> Usage:
    model = text(attributes.get("llm.model_name")) or text(
        attributes.get("gen_ai.response.model")
    ) or text(attributes.get("gen_ai.request.model"))  # fmt: skip
    # OpenInference, the GenAI conventions, then their names before the rename to
    # input/output (OpenLLMetry on semantic-conventions-ai 0.4). A total without the split
    # (``llm.usage.total_tokens`` alone) cannot be priced: input and output differ in price.
    prompt = (
        count(attributes.get("llm.token_count.prompt"))
        or count(attributes.get("gen_ai.usage.input_tokens"))
        or count(attributes.get("gen_ai.usage.prompt_tokens"))
    )
    completion = (
        count(attributes.get("llm.token_count.completion"))
        or count(attributes.get("gen_ai.usage.output_tokens"))
        or count(attributes.get("gen_ai.usage.completion_tokens"))
    )
    return Usage(
        model=model or "unknown",
        provider=provider(attributes),
        prompt_tokens=prompt,
        completion_tokens=completion,
    )


def embedding_usage(attributes: Mapping[str, Any]) -> Usage | None:
    model = (
        text(attributes.get("embedding.model_name"))
        or text(attributes.get("gen_ai.response.model"))
        or text(attributes.get("gen_ai.request.model"))
    )
    # An embedding's input is its whole use, so a total counts too (OpenLLMetry's
    # ``llm.usage.total_tokens``).
    tokens = (
        count(attributes.get("llm.token_count.prompt"))
        or count(attributes.get("llm.token_count.total"))
        or count(attributes.get("gen_ai.usage.input_tokens"))
        or count(attributes.get("gen_ai.usage.prompt_tokens"))
        or count(attributes.get("llm.usage.total_tokens"))
    )
    if model is None or not tokens:
        return None
    return Usage(model, provider(attributes), embedding_tokens=tokens)


def provider(attributes: Mapping[str, Any]) -> str | None:
    return (
        text(attributes.get("llm.provider"))
        or text(attributes.get("llm.system"))
        or text(attributes.get("gen_ai.provider.name"))
        or text(attributes.get("gen_ai.system"))
    )
