"""What one detector provides for another, so that neither reads the other's section.

A detector never uses a sibling: not its modules, and not its config. Where one needs what
another's settings decide (the review detector: the pass rules of the evaluations compared
with review; the shadow detector: whether review is on), the value is named here, in the
core, as a ``SharedValue``: its type, and the default that holds where no registered
component provides it. The owner declares it (``DetectorComponent.provides``: its own
validated section -> ``KEY.provide(value)``), the core collects what every component
provides once the config is validated (``monitor.contract.config.shared_values``), and a detector
reads it as ``BuildContext.shared[KEY]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from monitor.contract.slicing import Slicer
from monitor.contract.trace import EvaluationResult

T = TypeVar("T")

# Whether a result passes one evaluation's rule; None when that rule cannot judge it.
PassRule = Callable[[EvaluationResult], bool | None]
PassRules = Mapping[str, PassRule]


@dataclass(frozen=True, eq=False)
class SharedValue(Generic[T]):
    """A value one component provides for others: its name and its default."""

    name: str
    default: T

    def provide(self, value: T) -> Provision:
        """This value as its owner provides it."""
        return Provision(self, value)


@dataclass(frozen=True)
class Provision:
    """One value a component provides (``SharedValue.provide``)."""

    key: SharedValue[Any]
    value: Any


class SharedValues:
    """The values the registered components provide, read by key; a key no component
    provides reads as its default."""

    def __init__(self, provisions: Iterable[Provision] = ()) -> None:
        self._values: dict[SharedValue[Any], Any] = {}
        for provision in provisions:
            if provision.key in self._values:
                raise TypeError(f"two components provide {provision.key.name!r}")
            self._values[provision.key] = provision.value

    def __getitem__(self, key: SharedValue[T]) -> T:
        return cast("T", self._values.get(key, key.default))


# The evaluations detector provides the pass rules of the evaluations set
# compare_with_review, by name; the review detector compares their results with its verdicts.
COMPARED_WITH_REVIEW: SharedValue[PassRules] = SharedValue("evaluations compared with review", {})
# The review detector provides whether it is on; the shadow detector keeps answers' text
# only then, where the review queue keeps it already.
REVIEW_ENABLED: SharedValue[bool] = SharedValue("review enabled", False)
# The slices detector provides the slicer of its allow-lists; the guardrails' detectors
# count their verdicts by it (off by default: no slice, no series).
SLICER: SharedValue[Slicer] = SharedValue("trace slices", Slicer())
