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

import math
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from collectors.inspect.missing import (
    KIND_OF_STAGE,
    Mapped,
    MissingReasons,
    not_a_request,
    parsed_json,
)
from collectors.inspect.shapes import escape_pointer
from collectors.inspect.suggest import request_suggestion, suggestions
from collectors.spans.config import MappingConfig
from collectors.spans.openinference import TraceMapper
from collectors.spans.span import Span
from collectors.spans.stages import judged_spans
from monitor.coverage import PRESENT, REQUEST
from monitor.trace import Context, RagTrace, Usage

MAX_ORIGINS = 10  # places named per value; a report says how many more hold it
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


def span_json(span: Span) -> dict[str, str]:
    return {"span": span.name, "span_id": span.span_id, "scope": span.scope}


def inspect_trace(spans: Sequence[Span], mapping: MappingConfig) -> dict[str, Any]:
    """The report of one trace: its spans, the fields it maps to with their origins, the
    fields missing with the reason, and the ``mapping:`` content that would fill some."""
    mapper = TraceMapper(mapping)
    kinds = mapper.span_kinds(spans)
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
            more, fills = suggestions(*_missing(remapped, spans, mapper.span_kinds(spans), mapping))
            report["mapping"] = {**as_request, **more}
            report["mapping_fills"] = {key: [REQUEST] for key in as_request} | fills
        return report
    mapped, missing = _missing(trace, spans, kinds, mapping)
    request = mapped.request
    suggested, fills = suggestions(mapped, missing)
    report["request_span"] = span_json(request)
    report["fields"] = _Provenance(mapped).fields(trace)
    report["missing"] = missing
    report["mapping"] = suggested
    report["mapping_fills"] = fills
    return report


def _missing(
    trace: RagTrace, spans: Sequence[Span], kinds: Mapping[str, str], mapping: MappingConfig
) -> tuple[Mapped, dict[str, str]]:
    """The trace as mapped, and each field it lacks with the reason."""
    request = next(span for span in spans if span.span_id == trace.root_span_id)
    mapped = Mapped(trace, spans, kinds, judged_spans(spans, kinds), request, mapping)
    why = MissingReasons(mapped)
    missing = {name: why.missing(name) for name, present in PRESENT.items() if not present(trace)}
    return mapped, missing


# --- finding mapped values among the attributes ---------------------------------------------


class _Values:
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


def _family(origin: Origin) -> Origin:
    """The indexed family of a place: ``retrieval.documents.N.document.id``, ``/N/id``."""
    return Origin(
        origin.span, origin.where, _DIGITS.sub("N", origin.name), _DIGITS.sub("N", origin.pointer)
    )


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
        self._values = _Values(mapped.spans, mapped.request)

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
                family = _family(found[0])
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
