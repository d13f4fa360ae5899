"""The generated rules, evaluated on one process's own registry (``rag-monitor demo``).

Prometheus evaluates the rules over a fleet and a rate window; the demo has one
sidecar and shows, every few seconds, what the recording rules and each alert's
condition say over the interval since its last look. Everything comes from the
rule document of ``alerts.rules.build_rules``; nothing is restated here.

The shapes understood are the ones the rules use for their plain conditions: an
alert expression is clauses joined by ``and on (...)``, each ``TERM`` or
``TERM OP NUMBER``; a TERM is a recorded series (its rule a ratio of two rates,
optionally ``1 - (...)``, a ``histogram_quantile`` of a rate, an increase, or the
Wilson bound of a recorded share and count, ``monitor.rulekit.evidence.wilson_bound``), a raw
gauge, or ``sum by (...) (increase(COUNTER[window]))``. A pass share's switch to its
review-corrected bound reads as the judge's own bound (the demo has no reviewers). A
record may have several rules (one per stage); a clause's label matchers choose the one
that fits. An alert
of another shape (the regeneration band needs weeks of history; ``up`` exists only
in Prometheus) is reported as not evaluated here.
"""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from monitor.rulekit.evidence import Side, wilson

NO_EVIDENCE = "no evidence yet"
NOT_HERE = "evaluated by Prometheus only"

_OPS: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt, ">": operator.gt, "<=": operator.le,
    ">=": operator.ge, "==": operator.eq, "!=": operator.ne,
}  # fmt: skip
_SELECTOR = re.compile(r"(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?")
_MATCHER = re.compile(r'(\w+)="([^"]*)"')
_SUM_OF = r"sum by \((?P<by>[^)]*)\) \((?P<fn>rate|increase)\((?P<sel>[^\[]+)\[[^\]]+\]\)\)"
_CLAUSE = re.compile(r"(?P<term>.+?)(?: (?P<op>[<>!=]=?) (?P<threshold>[-+.\deE]+))?")
_QUANTILE = re.compile(rf"histogram_quantile\((?P<q>[\d.]+), {_SUM_OF}\)")
_RATIO = re.compile(rf"{_SUM_OF}\n/\n\({_SUM_OF.replace('?P<', '?P<d_')} > 0\)")
_AND = re.compile(r"\nand on \([^)]*\)\n")
_NUMBER = r"[-+.\deE]+"
_WILSON = re.compile(
    rf"\(\n  (?P<share>\S+) \+ {_NUMBER} / (?P<count>\S+)\n  (?P<sign>[-+]) (?P<z>{_NUMBER}) "
    rf"\* sqrt\(.*\)\n\)\n/\n\(1 \+ {_NUMBER} / \S+\)"
)

# The page test of a corrected pass share (``monitor.rulekit.prediction_powered``): the
# corrected bound once enough random reviews, else the judge's own. The demo has no
# reviewers, so the judge's own bound decides here, as in Prometheus before the reviews.
_SWITCH = re.compile(
    r'(?P<open>\(\n)?label_replace\(\n.*?"estimate", "corrected", "", ""\n\)\nor\n'
    r'label_replace\(\n(?P<judge>[^\n]+)\nunless on [^\n]+,\n"estimate", "judge", "", ""\n\)'
    r"(?(open)\n\))",
    re.DOTALL,
)

Labels = tuple[tuple[str, str], ...]  # a series' grouping labels, sorted


@dataclass(frozen=True)
class Selector:
    name: str
    labels: Labels

    @classmethod
    def parse(cls, text: str, extra: Labels = ()) -> Selector | None:
        match = _SELECTOR.fullmatch(text.strip())
        if match is None:
            return None
        matchers = match["labels"] or ""
        labels = _MATCHER.findall(matchers)
        if len(labels) != matchers.count("="):  # only exact matchers are understood
            return None
        merged = dict(labels)
        for key, value in extra:
            if merged.setdefault(key, value) != value:  # this rule is another stage's
                return None
        return cls(match["name"], tuple(sorted(merged.items())))


@dataclass(frozen=True)
class Term:
    """A series to compute: ``kind`` is ratio, quantile, increase, gauge or wilson (the
    bound at ``q`` = z of the share and count terms in ``parts``, ``side`` of it)."""

    kind: str
    selector: Selector
    by: tuple[str, ...] = ()
    denominator: Selector | None = None
    complement: bool = False
    q: float = 0.0
    parts: tuple[Term, ...] = ()
    side: Side = "lower"


@dataclass(frozen=True)
class Clause:
    term: Term
    op: str | None
    threshold: float


@dataclass(frozen=True)
class Condition:
    """One alerting rule as clauses (None: a shape not evaluated here)."""

    alert: str
    clauses: tuple[Clause, ...] | None
    labels: Labels = ()  # what tells rules of one alert apart: stage, window

    @property
    def title(self) -> str:
        if not self.labels:
            return self.alert
        labels = ", ".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.alert}{{{labels}}}"


def _distinct_labels(rule: dict[str, Any]) -> Labels:
    """The label matchers of the alert's first clause (``{stage="total"}``) and its
    ``window`` label."""
    first = _SELECTOR.match(rule["expr"])
    written = Selector.parse(first[0]) if first else None
    labels = {k: v for k, v in written.labels if k != "job"} if written else {}
    if "window" in rule.get("labels", {}):
        labels["window"] = rule["labels"]["window"]
    return tuple(sorted(labels.items()))


def _grouping(by: str) -> tuple[str, ...]:
    labels = (label.strip() for label in by.split(","))
    return tuple(label for label in labels if label not in {"job", "le"})


Recordings = dict[str, list[str]]  # record name -> the expressions of its rules


def _recorded_term(name: str, extra: Labels, recordings: Recordings) -> Term | None:
    """The term of the first rule of record ``name`` that fits the label matchers
    ``extra`` of the clause using it."""
    for expr in recordings.get(name, []):
        term = _rule_term(expr, extra, recordings)
        if term is not None:
            return term
    return None


def _rule_term(expr: str, extra: Labels, recordings: Recordings) -> Term | None:
    """The term one recording rule computes, with the alert's label matchers added."""
    complement = expr.startswith("1 - (\n") and expr.endswith("\n)")
    body = expr[len("1 - (\n") : -len("\n)")] if complement else expr
    if match := _QUANTILE.fullmatch(body):
        selector = Selector.parse(match["sel"], extra)
        if selector is None:
            return None
        return Term("quantile", selector, _grouping(match["by"]), q=float(match["q"]))
    if match := _RATIO.fullmatch(body):
        numerator, denominator = Selector.parse(match["sel"], extra), Selector.parse(match["d_sel"])
        if numerator is None or denominator is None:
            return None
        return Term("ratio", numerator, _grouping(match["by"]), denominator, complement)
    if (match := re.fullmatch(_SUM_OF, body)) and match["fn"] == "increase":
        selector = Selector.parse(match["sel"], extra)
        return None if selector is None else Term("increase", selector, _grouping(match["by"]))
    if match := _WILSON.fullmatch(body):
        share = _recorded_term(match["share"], extra, recordings)
        count = _recorded_term(match["count"], extra, recordings)
        if share is None or count is None:
            return None
        side: Side = "lower" if match["sign"] == "-" else "upper"
        return Term("wilson", share.selector, q=float(match["z"]), parts=(share, count), side=side)
    return None


def _term(text: str, recordings: Recordings) -> Term | None:
    if match := re.fullmatch(_SUM_OF, text):
        selector = Selector.parse(match["sel"])
        if match["fn"] == "increase" and selector is not None:
            return Term("increase", selector, _grouping(match["by"]))
        return None
    selector = Selector.parse(text)
    if selector is None:
        return None
    if selector.name in recordings:
        return _recorded_term(selector.name, selector.labels, recordings)
    return Term("gauge", selector)


def conditions(rules: dict[str, Any]) -> tuple[dict[str, list[Term]], list[Condition]]:
    """The evaluable recording rules by name, and every alert's condition, from a rule
    document (``build_rules``)."""
    all_rules = [rule for group in rules["groups"] for rule in group["rules"]]
    recordings: Recordings = {}
    for rule in (rule for rule in all_rules if "record" in rule):
        recordings.setdefault(rule["record"], []).append(rule["expr"])
    recorded = {
        name: [term for expr in exprs if (term := _rule_term(expr, (), recordings))]
        for name, exprs in recordings.items()
    }
    found = []
    for written in (rule for rule in all_rules if "alert" in rule):
        rule = {**written, "expr": _SWITCH.sub(lambda match: match["judge"], written["expr"])}
        clauses: list[Clause] | None = []
        for text in _AND.split(rule["expr"]):
            match = None if "\n" in text else _CLAUSE.fullmatch(text)
            term = match and _term(match["term"], recordings)
            if match is None or term is None or clauses is None:
                clauses = None
                break
            clauses.append(Clause(term, match["op"], float(match["threshold"] or "nan")))
        found.append(
            Condition(rule["alert"], tuple(clauses) if clauses else None, _distinct_labels(rule))
        )
    return {name: terms for name, terms in recorded.items() if terms}, found


class RuleEvaluator:
    """Evaluates the rules on ``registry`` over the interval since the last ``evaluate``
    (counters and histograms by their change, gauges as they are)."""

    def __init__(self, rules: dict[str, Any], registry: CollectorRegistry) -> None:
        self.recordings, self.conditions = conditions(rules)
        self._registry = registry
        self._last: dict[tuple[str, Labels], float] = {}

    def evaluate(self) -> tuple[dict[str, float], dict[str, str]]:
        """(recorded series -> value, alert title -> state) for this interval."""
        samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for metric in self._registry.collect():
            for s in metric.samples:
                samples.setdefault(s.name, []).append((s.labels, s.value))
        now: dict[tuple[str, Labels], float] = {}
        interval = _Interval(samples, self._last, now)
        recorded = {
            f"{name}{_braces(group)}": value
            for name, terms in self.recordings.items()
            for term in terms
            for group, value in interval.values(term).items()
        }
        states = {c.title: interval.state(c) for c in self.conditions}
        self._last.update(now)
        return recorded, states


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

    def state(self, condition: Condition) -> str:
        if condition.clauses is None:
            return NOT_HERE
        shown = self.values(condition.clauses[0].term)
        if not shown:
            return NO_EVIDENCE
        value = next(iter(shown.values()))
        holds = [
            any(_OPS[c.op](v, c.threshold) for v in self.values(c.term).values())
            for c in condition.clauses
            if c.op is not None
        ]
        if not holds:
            return NOT_HERE
        if all(holds):
            return f"BREACH ({value:.4g})"
        return f"ok ({value:.4g})" if not holds[0] else f"too little evidence ({value:.4g})"


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
