"""The generated rules, evaluated on one process's own registry (``rag-monitor demo``).

Prometheus evaluates the rules over a fleet and a rate window; the demo has one
sidecar and shows, every few seconds, what the recording rules and each alert's
condition (``demo.rule_conditions``) say over its own window: the interval since the
look ``window_s`` ago. An alert whose shape the demo does not understand is reported
as evaluated by Prometheus only.
"""

from __future__ import annotations

import math
import operator
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from demo.rule_conditions import Condition, Labels, Selector, Term, conditions
from monitor.contract.rulekit.evidence import wilson
from monitor.contract.sidecar_registry import SidecarRegistry

OK = "ok"
BREACH = "BREACH"
TOO_LITTLE = "too little evidence"  # the first clause holds, another (its evidence) not yet
NO_EVIDENCE = "no evidence yet"
NOT_HERE = "evaluated by Prometheus only"

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, ">": operator.gt, "<=": operator.le,
    ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
}  # fmt: skip


@dataclass(frozen=True)
class Reading:
    """One alert condition over the window: its state and what its first clause reads."""

    state: str  # OK, BREACH, TOO_LITTLE, NO_EVIDENCE or NOT_HERE
    value: float | None = None  # the first clause's estimate: a bound's share, a ratio, ...
    bound: float | None = None  # the first clause's evidence bound, where it is one
    evidence: float | None = None  # the observations behind the value (a bound's count, ...)
    op: str | None = None  # the first clause's test: op threshold
    threshold: float | None = None


K = TypeVar("K")


class Looks(Generic[K]):
    """Counter totals at each look, kept back to the latest look at least ``window_s``
    before the newest: what a change over the window is taken from."""

    def __init__(self, window_s: float) -> None:
        self._window_s = window_s
        self._looks: deque[tuple[float, dict[K, float]]] = deque()  # oldest first

    def baseline(self, at: float) -> tuple[float, dict[K, float]] | None:
        """The latest look at least ``window_s`` before ``at`` (None: none is that old,
        so the window starts at the start)."""
        while len(self._looks) > 1 and self._looks[1][0] <= at - self._window_s:
            self._looks.popleft()
        if self._looks and self._looks[0][0] <= at - self._window_s:
            return self._looks[0]
        return None

    def add(self, at: float, totals: dict[K, float]) -> None:
        """Record a look; a total it lacks keeps its value from the look before."""
        self._looks.append((at, {**(self._looks[-1][1] if self._looks else {}), **totals}))


Totals = dict[tuple[str, Labels], float]  # a counter's total by series and group


class RuleEvaluator:
    """Evaluates the rules on ``registry`` over a window: counters and histograms by their
    change since the latest look at least ``window_s`` ago (0: since the last look, or
    since the start while no look is that old), gauges as they are."""

    def __init__(
        self,
        rules: dict[str, Any],
        registry: SidecarRegistry,
        window_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.recordings, self.conditions = conditions(rules)
        self._registry = registry
        self._clock = clock
        self._looks: Looks[tuple[str, Labels]] = Looks(window_s)

    def evaluate(self) -> tuple[dict[str, float], dict[str, Reading]]:
        """(recorded series -> value, alert title -> reading) over the window."""
        at = self._clock()
        baseline = self._looks.baseline(at)
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for metric in self._registry.collect():
            for s in metric.samples:
                samples.setdefault(s.name, []).append((s.labels, s.value))
        now: Totals = {}
        interval = _Interval(samples, baseline[1] if baseline else {}, now)
        recorded = {
            f"{name}{_braces(group)}": value
            for name, terms in self.recordings.items()
            for term in terms
            for group, value in interval.values(term).items()
        }
        readings = {c.title: interval.reading(c) for c in self.conditions}
        self._looks.add(at, now)
        return recorded, readings


def _braces(group: Labels) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in group) + "}" if group else ""


@dataclass
class _Interval:
    samples: dict[str, list[tuple[dict[str, str], float]]]
    last: dict[tuple[str, Labels], float]
    now: dict[tuple[str, Labels], float]

    def _grouped(self, selector: Selector, by: tuple[str, ...]) -> dict[Labels, float]:
        """Sum of the matching samples by the ``by`` labels."""
        keys = by
        sums: dict[Labels, float] = {}
        for labels, value in self.samples.get(selector.name, []):
            if all(labels.get(k) == v for k, v in selector.labels):
                group = tuple((k, labels.get(k, "")) for k in keys)
                sums[group] = sums.get(group, 0.0) + value
        return sums

    def _change(self, selector: Selector, by: tuple[str, ...]) -> dict[Labels, float]:
        changes = {}
        for group, total in self._grouped(selector, by).items():
            key = (f"{selector.name}{_braces(selector.labels)}", group)
            self.now[key] = total
            changes[group] = total - self.last.get(key, 0.0)
        return changes

    def values(self, term: Term) -> dict[Labels, float]:
        if term.kind == "gauge":
            return {
                tuple(sorted(labels.items())): value
                for labels, value in self.samples.get(term.selector.name, [])
                if all(labels.get(k) == v for k, v in term.selector.labels)
            }
        if term.kind == "increase":
            return self._change(term.selector, term.by)
        if term.kind == "wilson":
            shares, counts = (self.values(part) for part in term.parts)
            return {
                group: wilson(share, counts[group], term.q, term.side)
                for group, share in shares.items()
                if counts.get(group, 0.0) > 0
            }
        if term.kind == "quantile":
            buckets: dict[Labels, list[tuple[float, float]]] = {}
            for group, change in self._change(term.selector, (*term.by, "le")).items():
                le = float(dict(group)["le"])
                buckets.setdefault(tuple(g for g in group if g[0] != "le"), []).append((le, change))
            found = {g: _quantile(term.q, b) for g, b in buckets.items()}
            return {g: v for g, v in found.items() if v is not None}
        assert term.denominator is not None
        numerators = self._change(term.selector, term.by)
        ratios = {}
        for group, whole in self._change(term.denominator, term.by).items():
            if whole > 0:
                share = numerators.get(group, 0.0) / whole
                ratios[group] = 1 - share if term.complement else share
        return ratios

    def reading(self, condition: Condition) -> Reading:
        """The condition's state, with the estimate, bound and evidence of its first clause."""
        if condition.alternatives is None:
            return Reading(NOT_HERE)
        first = condition.alternatives[0][0]
        op, threshold = first.op, None if first.op is None else first.threshold
        shown = self.values(first.term)
        if not shown:
            return Reading(NO_EVIDENCE, op=op, threshold=threshold)
        holds = [
            [
                any(_OPS[c.op](v, c.threshold) for v in self.values(c.term).values())
                for c in clauses
                if c.op is not None
            ]
            for clauses in condition.alternatives
        ]
        if not holds[0]:
            return Reading(NOT_HERE)
        if any(alternative and all(alternative) for alternative in holds):
            state = BREACH
        else:
            state = TOO_LITTLE if first.op is not None and holds[0][0] else OK
        value, bound, evidence = self._estimate(first.term)
        return Reading(state, value, bound, evidence, op, threshold)

    def _estimate(self, term: Term) -> tuple[float | None, float | None, float | None]:
        """(estimate, evidence bound, evidence) of ``term``'s first group."""
        if term.kind == "wilson":
            share, count = (_first(self.values(part)) for part in term.parts)
            return share, _first(self.values(term)), count
        if term.kind == "ratio":
            assert term.denominator is not None
            evidence = _first(self._change(term.denominator, term.by))
            return _first(self.values(term)), None, evidence
        return _first(self.values(term)), None, None


def _first(values: dict[Labels, float]) -> float | None:
    """The value of the first group (the demo's one sidecar has one per series)."""
    return next(iter(values.values()), None)


def _quantile(q: float, buckets: list[tuple[float, float]]) -> float | None:
    """Prometheus' ``histogram_quantile`` over cumulative (upper bound, count) buckets."""
    buckets.sort()
    if not buckets or buckets[-1][1] <= 0 or not math.isinf(buckets[-1][0]):
        return None
    rank = q * buckets[-1][1]
    lower, below = 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower
            return lower + (upper - lower) * (rank - below) / (count - below or 1.0)
        lower, below = upper, count
    return None
