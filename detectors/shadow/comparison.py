"""The paired comparison behind ``report shadow``: mean deltas with bootstrap intervals,
verdicts, slices by intent, the largest regressions, and every pair that is missing.

A verdict never rests on fewer than ``MIN_PAIRS`` scorable pairs, and it always says how
many pairs were not in it: unscorable pairs of the variant, and halves that never paired.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from detectors.shadow.model import METRICS, Metric, PairHalf, PairOutcome, paired_deltas

RESAMPLES = 2000
SEED = 20_240_601  # fixed: the same store gives the same report
MIN_PAIRS = 10
TOP_INTENTS = 10
REGRESSIONS_SHOWN = 5
NO_INTENT = "(none)"
OTHER_INTENTS = "(other)"
# The guardrails a verdict is given for, and the sign of a worse delta.
WORSE_WHEN: dict[Metric, int] = {
    "latency_total": 1,
    "latency_generate": 1,
    "latency_retrieve": 1,
    "latency_ttft": 1,
    "cost_usd": 1,
    "faithfulness": -1,
    "false_exclusion": 1,
}
# Shown per intent: the guardrails, and whether the answer changed at all.
SLICED: tuple[Metric, ...] = (*WORSE_WHEN, "answer_changed")
Word = Literal["better", "worse", "no evidence"]


@dataclass(frozen=True)
class Estimate:
    """The mean paired delta of one metric with its bootstrap 95% interval."""

    metric: Metric
    n: int
    mean: float | None = None
    low: float | None = None
    high: float | None = None


@dataclass(frozen=True)
class Verdict:
    variant: str
    estimate: Estimate
    word: Word
    unscorable: int  # joined pairs of the variant without this metric's delta


@dataclass(frozen=True)
class Regression:
    metric: Metric
    delta: float
    production: str  # trace ids only, unless text storage kept the text below
    shadow: str
    intent: str
    query: str | None = None
    production_answer: str | None = None
    shadow_answer: str | None = None


@dataclass
class Comparison:
    generated: float
    since: str
    pairs: Counter[str] = field(default_factory=Counter)  # joined pairs per shadow variant
    # (variant, outcome) of every half that never paired, and of duplicates.
    missing: Counter[tuple[str, str]] = field(default_factory=Counter)
    estimates: dict[str, list[Estimate]] = field(default_factory=dict)  # per variant
    disagreement: dict[str, Estimate] = field(default_factory=dict)  # per variant
    verdicts: list[Verdict] = field(default_factory=list)
    by_intent: list[tuple[str, str, Estimate]] = field(default_factory=list)
    regressions: list[Regression] = field(default_factory=list)

    @property
    def unmatched(self) -> int:
        return sum(n for (_, outcome), n in self.missing.items() if outcome != "duplicate")


def bootstrap_mean(values: Sequence[float], metric: Metric) -> Estimate:
    """The mean and its percentile bootstrap 95% interval (``RESAMPLES``, fixed seed)."""
    data = np.asarray(values, dtype=float)
    n = len(data)
    if n == 0:
        return Estimate(metric, 0)
    rng = np.random.default_rng(SEED)
    means = np.empty(RESAMPLES)
    chunk = max(1, 2_000_000 // n)  # bounds the index matrix to about 16 MB
    for start in range(0, RESAMPLES, chunk):
        stop = min(RESAMPLES, start + chunk)
        means[start:stop] = data[rng.integers(0, n, size=(stop - start, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Estimate(metric, n, float(data.mean()), float(low), float(high))


def verdict_word(estimate: Estimate, worse_sign: int) -> Word:
    """worse or better when the whole interval is on that side of 0; else no evidence."""
    if estimate.n < MIN_PAIRS or estimate.low is None or estimate.high is None:
        return "no evidence"
    if estimate.low * worse_sign > 0 and estimate.high * worse_sign > 0:
        return "worse"
    if estimate.low * worse_sign < 0 and estimate.high * worse_sign < 0:
        return "better"
    return "no evidence"


def compare(outcomes: Sequence[PairOutcome], since: str, generated: float) -> Comparison:
    """The comparison of the joined pairs among ``outcomes``, per shadow variant."""
    result = Comparison(generated, since)
    joined: dict[str, list[PairOutcome]] = {}
    for outcome in outcomes:
        if outcome.outcome == "joined":
            joined.setdefault(outcome.variant, []).append(outcome)
        else:
            result.missing[(outcome.half.variant, outcome.outcome)] += 1
    for variant, pairs in sorted(joined.items()):
        result.pairs[variant] = len(pairs)
        _compare_variant(result, variant, pairs)
    return result


@dataclass(frozen=True)
class _Row:
    production: PairHalf
    shadow: PairHalf
    deltas: dict[Metric, float | None]

    @property
    def intent(self) -> str:
        return self.production.intent or NO_INTENT


def _compare_variant(result: Comparison, variant: str, pairs: list[PairOutcome]) -> None:
    rows = [_Row(*pair.both(), paired_deltas(*pair.both())) for pair in pairs]
    estimates = []
    for metric in METRICS:
        estimate = bootstrap_mean(_values(rows, metric), metric)
        estimates.append(estimate)
        if metric in WORSE_WHEN:
            word = verdict_word(estimate, WORSE_WHEN[metric])
            result.verdicts.append(Verdict(variant, estimate, word, len(rows) - estimate.n))
            result.regressions += _largest(metric, rows)
    result.estimates[variant] = estimates
    disagreements = [abs(value) for value in _values(rows, "false_exclusion")]
    result.disagreement[variant] = bootstrap_mean(disagreements, "false_exclusion")
    result.by_intent += _by_intent(variant, rows)


def _values(rows: Sequence[_Row], metric: Metric) -> list[float]:
    return [value for row in rows if (value := row.deltas[metric]) is not None]


def _by_intent(variant: str, rows: list[_Row]) -> list[tuple[str, str, Estimate]]:
    """Estimates per intent: the ``TOP_INTENTS`` most frequent, the rest as one slice."""
    counts = Counter(row.intent for row in rows)
    shown = {intent for intent, _ in counts.most_common(TOP_INTENTS)}
    slices: dict[str, list[_Row]] = {}
    for row in rows:
        slices.setdefault(row.intent if row.intent in shown else OTHER_INTENTS, []).append(row)
    estimates = []
    for intent in sorted(slices):
        for metric in SLICED:
            values = _values(slices[intent], metric)
            if values:
                estimates.append((variant, intent, bootstrap_mean(values, metric)))
    return estimates


def _largest(metric: Metric, rows: list[_Row]) -> list[Regression]:
    """The pairs whose delta is furthest on the worse side, worst first."""
    sign = WORSE_WHEN[metric]
    worse = [row for row in rows if (row.deltas[metric] or 0.0) * sign > 0]
    worse.sort(key=lambda row: -(row.deltas[metric] or 0.0) * sign)
    return [
        Regression(
            metric,
            row.deltas[metric] or 0.0,
            row.production.trace_id,
            row.shadow.trace_id,
            row.intent,
            row.production.query,
            row.production.answer,
            row.shadow.answer,
        )
        for row in worse[:REGRESSIONS_SHOWN]
    ]
