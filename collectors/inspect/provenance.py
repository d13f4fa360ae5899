"""Where each field of a mapped ``RagTrace`` came from (``rag-monitor inspect``).

The mapper is not re-implemented here: the trace is mapped exactly as the sidecar maps
it, then each mapped value is looked up among the spans' attributes (strings and numbers
as they are, values inside JSON attributes named by their JSON pointer). A value found
nowhere was derived (a document id made from its text, a stage's seconds from span
times). What is missing and why: ``collectors.inspect.missing``; the ``mapping:`` that
fills it: ``collectors.inspect.suggest``.

The report is a plain JSON-able dict: ``--json`` prints it, the terminal view renders it.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from collectors.inspect.missing import (
    KIND_OF_STAGE,
    Mapped,
    MissingReasons,
    not_a_request,
)
from collectors.inspect.suggest import request_suggestion, suggestions
from collectors.inspect.values import Origin, Values, indexed_family
from collectors.spans.config import MappingConfig
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span
from collectors.spans.stages import judged_spans
from collectors.spans.tools import RetrievalTools
from collectors.spans.tree import SpanTree
from monitor.contract.field_presence import PRESENT, REQUEST
from monitor.contract.trace import Context, RagTrace, Usage

MAX_ORIGINS = 10  # places named per value; a report says how many more hold it


def span_json(span: Span) -> dict[str, str]:
    return {"span": span.name, "span_id": span.span_id, "scope": span.scope}


def inspect_trace(
    spans: Sequence[Span], mapping: MappingConfig, refused: Collection[str] = ()
) -> dict[str, Any]:
    """The report of one trace: its spans, the fields it maps to with their origins, the
    fields missing with the reason, and the ``mapping:`` content that would fill some
    (never a document setting of ``refused``, ``suggest.constant_documents``)."""
    mapper = TraceMapper(mapping)
    tree = mapper.tree(spans)
    kinds = tree.kinds
    trace = mapper.build(spans, "otlp")
    report: dict[str, Any] = {
        "trace_id": spans[0].trace_id,
        "rag_request": trace is not None,
        # the scope field coverage counts the trace under (rag_trace_fields_total)
        "instrumentation": trace.instrumentation
        if trace is not None
        else next((span.scope for span in spans if span.scope), None),
        "spans": [
            {**span_json(span), "parent_span_id": span.parent_span_id, "kind": kinds[span.span_id]}
            for span in sorted(spans, key=lambda s: (s.start_ns, -s.end_ns))
        ],
    }
    if trace is None:
        report["missing"] = {REQUEST: not_a_request(spans, kinds, mapping)}
        as_request = request_suggestion(spans, mapping)
        report["mapping"], report["mapping_fills"] = as_request, {}
        if as_request:
            # Read as a request, the trace may lack more: what fills that comes too.
            mapping = MappingConfig.model_validate({**mapping.model_dump(), **as_request})
            mapper = TraceMapper(mapping)
            remapped = mapper.build(spans, "otlp")
            assert remapped is not None  # request_suggestion mapped it so
            more = suggestions(*_missing(remapped, mapper.tree(spans), mapping), refused)
            report["mapping"] = {**as_request, **more.mapping}
            report["mapping_fills"] = {key: [REQUEST] for key in as_request} | more.fills
            report["suggested_documents"] = more.documents
        return report
    mapped, missing = _missing(trace, tree, mapping)
    request = mapped.request
    suggested = suggestions(mapped, missing, refused)
    report["request_span"] = span_json(request)
    report["fields"] = _Provenance(mapped).fields(trace)
    report["missing"] = missing
    report["mapping"] = suggested.mapping
    report["mapping_fills"] = suggested.fills
    # what each document setting filled here, for constant_documents across the traces
    report["suggested_documents"] = suggested.documents
    return report


def _missing(
    trace: RagTrace, tree: SpanTree, mapping: MappingConfig
) -> tuple[Mapped, dict[str, str]]:
    """The trace as mapped, and each field it lacks with the reason."""
    request = next(span for span in tree.spans if span.span_id == trace.root_span_id)
    mapped = Mapped(trace, tree.spans, tree.kinds, judged_spans(tree), request, mapping)
    why = MissingReasons(mapped)
    missing = {name: why.missing(name) for name, present in PRESENT.items() if not present(trace)}
    return mapped, missing


# --- the fields and their origins -----------------------------------------------------------


def _entry(value: Any, origins: Sequence[Origin], derived: str | None = None) -> dict[str, Any]:
    """One field: its value, the places holding it, and how it was derived when no
    attribute holds it (or when span times made it)."""
    out: dict[str, Any] = {"value": value}
    if origins:
        out["from"] = [origin.as_json() for origin in origins[:MAX_ORIGINS]]
        if len(origins) > MAX_ORIGINS:
            out["more"] = len(origins) - MAX_ORIGINS
    if derived is not None or not origins:
        out["derived"] = derived or "no attribute holds this value: the mapping derived it"
    return out


class _Provenance:
    """The origins of every field of one mapped trace."""

    def __init__(self, mapped: Mapped) -> None:
        self._spans = mapped.spans
        self._request = mapped.request
        self._of_kind = mapped.of_kind
        self._mapping = mapped.mapping
        self._values = Values(mapped.spans, mapped.request)
        # The retrieval steps: RETRIEVER spans and the tool calls that retrieved. A
        # document's text sits in later spans too (the chat messages that quote it): the
        # steps it came from are named first.
        tools = RetrievalTools(mapped.mapping.retrieval_tools)
        self._retrievals = [
            *mapped.of_kind("RETRIEVER"),
            *(span for span in mapped.of_kind("TOOL") if tools.documents(span) is not None),
        ]

    def fields(self, trace: RagTrace) -> dict[str, Any]:
        find = self._values.find
        out: dict[str, Any] = {}
        texts = {
            "query": trace.query,
            "answer": trace.answer,
            "tenant": trace.tenant,
            "session_id": trace.session_id,
            "user_id": trace.user_id,
            "intent": trace.intent,
            "probe_id": trace.probe_id,
            "filter_predicate": trace.filter_predicate,
            "variant": trace.variant,
            "pair_id": trace.pair_id,
        }
        for name, value in texts.items():
            if value is not None:
                out[name] = _entry(value, find(value))
        if trace.contexts:
            out["contexts"] = [self._context(context) for context in trace.contexts]
        for name, ids in (
            ("retrieved", trace.retrieved),
            ("relevance_excluded", trace.relevance_excluded),
            ("entitlement_excluded", trace.entitlement_excluded),
        ):
            if ids:
                out[name] = self._ids(ids, trace.contexts if name == "retrieved" else ())
        out["stages"] = self._stages(trace)
        if trace.usage:
            out["usage"] = [self._usage(usage) for usage in trace.usage]
        if trace.cost_usd is not None:
            costs = find(trace.cost_usd)
            summed = None if costs else "the sum of the LLM spans' llm.cost.total"
            out["cost_usd"] = _entry(trace.cost_usd, costs, summed)
        if trace.query_embedding is not None:
            origins = find(list(trace.query_embedding))
            out["query_vector"] = _entry({"dimension": len(trace.query_embedding)}, origins)
        if trace.query_embedding_model is not None:
            out["query_embedding_model"] = _entry(
                trace.query_embedding_model, find(trace.query_embedding_model)
            )
        if trace.metadata:
            out["metadata"] = _entry(dict(trace.metadata), find(dict(trace.metadata)))
        for name in ("service_name", "service_version", "deployment_environment"):
            value = getattr(trace, name)
            if value is not None:
                out[name] = _entry(value, find(value, where="resource"))
        if trace.instrumentation is not None:
            scoped = [
                Origin(span, "scope")
                for span in [self._request, *self._spans]
                if span.scope == trace.instrumentation
            ][:1]
            out["instrumentation"] = _entry(trace.instrumentation, scoped)
        out["time"] = _entry(trace.time.isoformat(), [Origin(self._request, "times")])
        return out

    def _context(self, context: Context) -> dict[str, Any]:
        find = self._values.find
        out: dict[str, Any] = {}
        text_origins = find(context.text) if context.text else []
        text_origins.sort(key=lambda origin: origin.span not in self._retrievals)
        near = text_origins[0] if text_origins else None
        if context.id_derived:
            out["doc_id"] = _entry(
                context.doc_id, (), "made from the document's text: it came without an id"
            )
        else:
            out["doc_id"] = _entry(context.doc_id, self._values.find_id(context.doc_id, near))
        if context.chunk_id is not None:
            out["chunk_id"] = _entry(context.chunk_id, self._values.find_id(context.chunk_id, near))
        if context.text is not None:
            out["text"] = _entry(context.text, text_origins)
        if context.score is not None:
            out["score"] = _entry(context.score, find(context.score, near))
        if context.tenant is not None:
            out["tenant"] = _entry(context.tenant, find(context.tenant, near))
        out["id_derived"] = context.id_derived
        return out

    def _ids(self, ids: Sequence[str], contexts: Sequence[Context]) -> dict[str, Any]:
        """A list of document ids: one attribute holding the list, else the families of
        places holding each id (``retrieval.documents.N.document.id``)."""
        whole = self._values.find(list(ids))
        if whole:
            return _entry(list(ids), whole)
        derived = {context.doc_id for context in contexts if context.id_derived}
        families: dict[tuple[str, str, str, str], Origin] = {}
        for doc_id in ids:
            if doc_id in derived:
                continue
            found = self._values.find_id(doc_id, None)
            if found:
                family = indexed_family(found[0])
                families.setdefault(
                    (family.span.span_id, family.where, family.name, family.pointer), family
                )
        note = f"{len(derived)} made from document texts" if derived else None
        return _entry(list(ids), list(families.values()), note)

    def _stages(self, trace: RagTrace) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for stage, seconds in trace.stages.items():
            if stage == "total":
                out[stage] = _entry(
                    seconds, [Origin(self._request, "times")], "the request span's duration"
                )
            elif stage == "ttft":
                out[stage] = self._ttft(seconds)
            elif stage == "retrieve":
                out[stage] = _entry(
                    seconds,
                    [Origin(span, "times") for span in self._retrievals],
                    "the wall-clock union of the retrieval steps' times (RETRIEVER spans, tool "
                    "calls that retrieved) within the request span",
                )
            else:
                kind = KIND_OF_STAGE[stage]
                out[stage] = _entry(
                    seconds,
                    [Origin(span, "times") for span in self._of_kind(kind)],
                    f"the wall-clock union of the {kind} spans' times within the request span",
                )
        return out

    def _ttft(self, seconds: float) -> dict[str, Any]:
        for span in self._spans:
            for event in span.events:
                if event.name in self._mapping.first_token_events:
                    return _entry(
                        seconds,
                        [Origin(span, "event", event.name)],
                        "the event's time minus its span's start",
                    )
        return _entry(seconds, self._values.find(seconds))

    def _usage(self, usage: Usage) -> dict[str, Any]:
        find = self._values.find
        model = find(usage.model)
        near = model[0] if model else None
        out = {
            "model": _entry(usage.model, model, None if model else "no model attribute: unknown")
        }
        if usage.provider is not None:
            out["provider"] = _entry(usage.provider, find(usage.provider, near))
        for name in ("prompt_tokens", "completion_tokens", "embedding_tokens", "rerank_units"):
            value = getattr(usage, name)
            if value:
                out[name] = _entry(value, find(value, near))
        return out
