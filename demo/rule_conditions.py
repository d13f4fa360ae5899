"""The generated rules read as terms and conditions the demo can evaluate on one
process's registry (``demo.rule_evaluation``); everything comes from the rule document of
``alerts.rules.build_rules``, nothing is restated here.

The shapes understood are the ones the rules use for their plain conditions: an
alert expression is alternatives joined by ``or``, each clauses joined by ``and on
(...)``, each clause ``TERM`` or ``TERM OP NUMBER``; a TERM is a recorded series (its
rule a ratio of two rates, optionally ``1 - (...)``, a ``histogram_quantile`` of a
rate, an increase, or the Wilson bound of a recorded share and count,
``monitor.contract.rulekit.evidence.wilson_bound``), a raw gauge, or ``sum by (...)
(increase(COUNTER[window]))``. A pass share's switch to its review-corrected bound
reads as the judge's own bound (the demo has no reviewers); a recording kept to the
judges that run reads as the recording inside. A record may have several
rules (one per stage); a clause's label matchers choose the one that fits. An alert of
another shape (the regeneration band needs weeks of history; ``up`` exists only in
Prometheus) has no condition here (None).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from monitor.contract.rulekit.evidence import Side

_SELECTOR = re.compile(r"(?P<name>[a-zA-Z_:][\w:]*)(?:\{(?P<labels>[^}]*)\})?")
_MATCHER = re.compile(r'(\w+)="([^"]*)"')
_SUM_OF = r"sum by \((?P<by>[^)]*)\) \((?P<fn>rate|increase)\((?P<sel>[^\[]+)\[[^\]]+\]\)\)"
_CLAUSE = re.compile(r"(?P<term>.+?)(?: (?P<op>[<>!=]=?) (?P<threshold>[-+.\deE]+))?")
_QUANTILE = re.compile(rf"histogram_quantile\((?P<q>[\d.]+), {_SUM_OF}\)")
_RATIO = re.compile(rf"{_SUM_OF}\n/\n\({_SUM_OF.replace('?P<', '?P<d_')} > 0\)")
_AND = re.compile(r"\nand on \([^)]*\)\n")
# A recording kept to the series that run now (``monitor.contract.rulekit.evidence.kept_to``): one
# process runs one judge, so the demo reads the recording inside.
_KEPT_TO = re.compile(
    r"\(\n(?P<body>.*)\n\)\nand on \([^)]*\)\ngroup by \([^)]*\) \([\w:]+\)", re.DOTALL
)
_OR = "\nor\n"
_NUMBER = r"[-+.\deE]+"
_WILSON = re.compile(
    rf"\(\n  (?P<share>\S+) \+ {_NUMBER} / (?P<count>\S+)\n  (?P<sign>[-+]) (?P<z>{_NUMBER}) "
    rf"\* sqrt\(.*\)\n\)\n/\n\(1 \+ {_NUMBER} / \S+\)"
)

# The page test of a corrected pass share (``monitor.contract.rulekit.corrected_rules``): the
# corrected bound once enough random reviews, or the judge's own. The demo has no
# reviewers, so the judge's own bound decides here.
_SWITCH = re.compile(
    r'(?P<open>\(\n)?label_replace\(\n.*?"estimate", "corrected", "", ""\n\)\nor\n'
    r'label_replace\(\n(?P<judge>[^\n]+)\nunless on .+?,\n"estimate", "judge", "", ""\n\)'
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


Clauses = tuple[Clause, ...]  # joined by ``and``


@dataclass(frozen=True)
class Condition:
    """One alerting rule as alternatives of clauses (None: a shape not evaluated here)."""

    alert: str
    alternatives: tuple[Clauses, ...] | None
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
    """The labels a term is kept apart by in one process: not its job, and not its judge
    (a process runs one)."""
    labels = (label.strip() for label in by.split(","))
    return tuple(label for label in labels if label not in {"job", "le", "judge"})


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
    if kept := _KEPT_TO.fullmatch(expr):
        expr = kept["body"]
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
        alternatives = [_clauses(text, recordings) for text in rule["expr"].split(_OR)]
        understood = all(alternatives) and tuple(a for a in alternatives if a is not None)
        found.append(Condition(rule["alert"], understood or None, _distinct_labels(rule)))
    return {name: terms for name, terms in recorded.items() if terms}, found


def _clauses(expr: str, recordings: Recordings) -> Clauses | None:
    """The clauses of one alternative (None: one of them is of a shape not understood)."""
    clauses = []
    for text in _AND.split(expr):
        match = None if "\n" in text else _CLAUSE.fullmatch(text)
        term = match and _term(match["term"], recordings)
        if match is None or term is None:
            return None
        clauses.append(Clause(term, match["op"], float(match["threshold"] or "nan")))
    return tuple(clauses)
