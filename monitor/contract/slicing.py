"""Slices: the parts of the traffic a guardrail is also counted by, beside its global figure.

A slice is a ``(dimension, value)`` pair: the request's intent (``rag.intent`` through the
configured allow-list) or one document type among its contexts (a metadata key through its
allow-list); an unlisted value is ``other``, a missing one ``none`` (``monitor.contract.variants.
bounded_label``), never free text. A request is in one intent slice and in one
document-type slice per distinct type among its contexts, so the document-type slices of
a request can add up to more than the request.

The slices detector owns the lists (``detectors.slices``) and provides the ``Slicer``
(``monitor.contract.shared.SLICER``); each guardrail's detector counts its own verdicts by slice
(``SliceCounter``) where it counts them globally, production traffic only: shadow and
canary traffic is compared, not judged. With the slices detector off the slicer gives no
slice and no series exists.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client import Counter

from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace
from monitor.contract.variants import NONE, OTHER, bounded_label

INTENT = "intent"
DOCUMENT_TYPE = "document_type"
DIMENSIONS = (INTENT, DOCUMENT_TYPE)
Slice = tuple[str, str]  # (dimension, value)
# The labels a slice counter and its recording rules carry.
SLICE_LABELS = ("dimension", "slice")


@dataclass(frozen=True)
class Slicer:
    """Which slices a trace is in, from the configured allow-lists."""

    intents: frozenset[str] = frozenset()
    document_types: frozenset[str] = frozenset()
    document_type_key: str = "file_type"

    @property
    def enabled(self) -> bool:
        return bool(self.intents)

    @property
    def values(self) -> dict[str, tuple[str, ...]]:
        """Every value each dimension can take, ``other`` and ``none`` included."""
        return {
            INTENT: (*sorted(self.intents), OTHER, NONE),
            DOCUMENT_TYPE: (*sorted(self.document_types), OTHER, NONE),
        }

    @property
    def size(self) -> int:
        """How many slices the lists make: what a slice alert's false-alert budget is
        shared by (the rules are written before the lists need be filled in)."""
        return sum(len(values) for values in self.values.values())

    def intent(self, trace: RagTrace) -> str:
        return bounded_label(trace.intent, self.intents)

    def document_types_of(self, trace: RagTrace) -> set[str]:
        """The distinct bounded document types among the trace's contexts (``none``: no
        context, or none names a type)."""
        if not trace.contexts:
            return {NONE}
        key, allowed = self.document_type_key, self.document_types
        types = set()
        for context in trace.contexts:
            value = context.metadata.get(key)
            types.add(bounded_label(value if isinstance(value, str) else None, allowed))
        return types

    def of(self, trace: RagTrace) -> tuple[Slice, ...]:
        """The trace's slices: its intent, then each of its document types (none when off)."""
        if not self.enabled:
            return ()
        types = sorted(self.document_types_of(trace))
        return ((INTENT, self.intent(trace)), *((DOCUMENT_TYPE, value) for value in types))

    def kept(self, slices: Iterable[Slice]) -> tuple[Slice, ...]:
        """Those of ``slices`` this slicer gives (a record from a replica configured
        otherwise may hold others: they are not counted, the labels stay bounded)."""
        known = self.values if self.enabled else {}
        return tuple(s for s in slices if s[1] in known.get(s[0], ()))

    def from_record(self, value: Any) -> tuple[Slice, ...]:
        """Slices read back from a record (a scorer's pair): hostile like every record, so
        each must be one this slicer could have given, or the record is refused
        (ValueError); absent, there are none."""
        if value is None or not self.enabled:
            return ()
        if isinstance(value, list) and len(value) > 1 + len(self.values[DOCUMENT_TYPE]):
            raise ValueError("slices must be a list of [dimension, value] pairs")
        slices = slices_from_record(value)
        if self.kept(slices) != slices:
            raise ValueError("a slice must be a [dimension, value] this sidecar gives")
        return slices


MAX_SLICES = 1 + 64 + 2  # an intent and at most every listed document type, other, none
MAX_SLICE_CHARS = 256


def slices_from_record(value: Any) -> tuple[Slice, ...]:
    """Slices as a stored record holds them, checked for shape only (a reader keeps those
    its own slicer gives: ``Slicer.kept``); ValueError when malformed."""
    if not isinstance(value, list) or len(value) > MAX_SLICES:
        raise ValueError("slices must be a list of [dimension, value] pairs")
    slices = []
    for item in value:
        match item:
            case [str(dimension), str(label)] if len(dimension) + len(label) <= MAX_SLICE_CHARS:
                slices.append((dimension, label))
            case _:
                raise ValueError("a slice is a [dimension, value] pair of short strings")
    return tuple(slices)


def slices_record(slices: Iterable[Slice]) -> list[list[str]]:
    """Slices as a record carries them (``Slicer.from_record`` reads them back)."""
    return [[dimension, value] for dimension, value in slices]


class SliceCounter:
    """A counter by slice (labels ``dimension``, ``slice`` and ``labels``), created only
    when the slicer is on, so that a sidecar without slices exports no such series."""

    def __init__(
        self,
        slicer: Slicer,
        name: str,
        documentation: str,
        registry: SidecarRegistry,
        labels: Collection[str] = (),
    ) -> None:
        self.enabled = slicer.enabled
        if not self.enabled:
            return
        counter = Counter(name, documentation, [*SLICE_LABELS, *labels], registry=registry)
        # labels() once per label set: slices and the callers' labels are bounded.
        self._child = functools.cache(counter.labels)

    def inc(self, slices: Iterable[Slice], *labels: str, amount: float = 1.0) -> None:
        if not self.enabled:
            return
        for dimension, value in slices:
            self._child(dimension, value, *labels).inc(amount)
