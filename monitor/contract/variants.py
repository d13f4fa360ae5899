"""Bounded label values from traffic: the pipeline variant, and any allow-listed slice.

A value a trace carries (``rag.variant``, ``rag.intent``, a document type) becomes a
metric label only through ``bounded_label``: kept when the configured allow-list holds
it, folded into ``other`` when it does not, and a fixed word when the trace has none.
So a label never has more values than its list plus two, whatever the traffic sends.

The variant is folded once, by the pipeline (``VariantFolding``), before any detector
sees the trace: afterwards ``trace.variant`` is None (production) or an allowed value,
and every detector reads it with ``variant_of``. ``ByVariant`` binds a metric's
children per variant on first use, production at once, so the guardrail series exist
from the start and a ``labels()`` lookup stays off the per-trace path.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable
from dataclasses import replace
from typing import Annotated, Generic, TypeVar

from prometheus_client import Counter
from pydantic import AfterValidator

from monitor.contract.names import VARIANT_FOLDED_TOTAL
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace

PRODUCTION = "production"  # the variant of a trace without rag.variant: what users are served
OTHER = "other"  # a value outside its allow-list
NONE = "none"  # no value at all (a slice label; a variant is never none)
RESERVED = frozenset({OTHER, NONE})
DEFAULT_VARIANTS = (PRODUCTION, "shadow", "canary")
MAX_VARIANTS = 16  # pipelines compared at once; each multiplies every guardrail series
# Allow-list entries become label values: short, plain, and never one of the fold words.
LABEL_VALUE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:/-]{0,63}$")

T = TypeVar("T")


def bounded_label(value: str | None, allowed: Collection[str], absent: str = NONE) -> str:
    """``value`` when ``allowed`` holds it, ``other`` when not, ``absent`` when empty."""
    if not value:
        return absent
    return value if value in allowed else OTHER


def allow_list(values: Iterable[str]) -> list[str]:
    """Validates a configured allow-list (pydantic adds the key path); drops duplicates."""
    checked: list[str] = []
    for value in values:
        if value in RESERVED:
            raise ValueError(f"{value!r} is reserved for values outside the list")
        if not LABEL_VALUE.match(value):
            raise ValueError(f"{value!r} is not a label value (1-64 of letters, digits, _ . : / -)")
        if value not in checked:
            checked.append(value)
    return checked


def variant_list(values: Iterable[str]) -> list[str]:
    """``allow_list`` with production first: it is implied, whether listed or not."""
    return allow_list([PRODUCTION, *values])


# Config field types: an allow-list of label values, and service.variants.
AllowList = Annotated[list[str], AfterValidator(allow_list)]
VariantList = Annotated[list[str], AfterValidator(variant_list)]


def variant_of(trace: RagTrace) -> str:
    """The trace's variant label (after the pipeline folded it): production by default."""
    return trace.variant or PRODUCTION


class VariantFolding:
    """Folds each trace's ``rag.variant`` into ``service.variants``; counts what it folds."""

    def __init__(self, variants: Collection[str], registry: SidecarRegistry) -> None:
        self.allowed = frozenset({PRODUCTION, *variants})
        self._folded = Counter(
            VARIANT_FOLDED_TOTAL,
            "Traces whose rag.variant is not in service.variants, exported as variant=other.",
            registry=registry,
        )

    @property
    def labels(self) -> frozenset[str]:
        """Every variant label value a trace can get."""
        return self.allowed | {OTHER}

    def fold(self, trace: RagTrace) -> RagTrace:
        """``trace`` itself, or a copy whose variant is ``other`` (the rare case)."""
        if trace.variant is None or trace.variant in self.allowed:
            return trace
        self._folded.inc()
        return replace(trace, variant=OTHER)


class ByVariant(Generic[T]):
    """A metric's children per variant: production bound at once, others on first use.

    Safe from several threads: binding the same child twice returns the same child.
    """

    def __init__(self, bind: Callable[[str], T]) -> None:
        self._bind = bind
        self._children = {PRODUCTION: bind(PRODUCTION)}

    def __getitem__(self, variant: str) -> T:
        child = self._children.get(variant)
        if child is None:
            child = self._children[variant] = self._bind(variant)
        return child

    def of(self, trace: RagTrace) -> T:
        """The child for ``trace``'s variant."""
        return self[variant_of(trace)]
