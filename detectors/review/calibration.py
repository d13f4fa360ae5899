"""Statistics over reviewed items: each judge (HHEM, an LLM judge) against people, and
implicit signals against the same review.

Both read only labels and counts (scores, verdict categories, feedback kinds), never
the text of an item.

Judge calibration, per judge: a reviewed item that a judge scored gives one pair (the
judge's verdict, the human verdict). Each item keeps the name of the judge that scored
it (items stored before judges had names were scored by HHEM); judges are never pooled,
since their scores mean different things (HHEM's probability, an LLM judge's share of
supported claims). A judge says "supported" when ``score >= threshold``. A person's ``yes``
is supported; ``no`` and ``partly`` are unsupported (a partly supported answer holds
an unsupported claim, which is what the judge is there to catch); ``no_claim`` has
nothing to support and leaves the pair out (counted). "Unsupported" is the positive
class of precision and recall.

Evaluation agreement, per evaluation set ``compare_with_review`` in detectors.evaluations:
a reviewed item carrying its result (judged by the evaluation's pass rule when the item
was sampled) gives one pair; a pass is "supported", a fail "unsupported", and the human
side is read as for a judge. Only such evaluations are compared: the reviewer answers
whether the answer is supported by its contexts, which says nothing of, say, relevance
or tone.

Implicit signals: per feedback kind (plus the ``follow_up`` stratum, the follow-up
pattern the sampler matched), the 2x2 table of kind present or absent against the
human "not supported or incomplete" (``no``, ``partly``, or reason ``incomplete``),
and its sample odds ratio with a 95% interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from detectors.review.model import ReviewItem, Verdict

Reviewed = Sequence[tuple[ReviewItem, Verdict]]

DEFAULT_JUDGE = "hhem"  # the judge of items stored without a judge name
SUPPORTED_LABEL = "supported"
UNSUPPORTED_LABEL = "unsupported"
BOOTSTRAP_RESAMPLES = 1000
BOOTSTRAP_SEED = 13
CONFIDENCE = 0.95
# The sampler's follow-up stratum is itself an implicit signal ("are you sure?").
FOLLOW_UP_SIGNAL = "follow_up"


def human_supported(verdict: Verdict) -> bool | None:
    """The reviewer's verdict as supported (True) or not; None for ``no_claim``."""
    if verdict.supported == "no_claim":
        return None
    return verdict.supported == "yes"


def judge_of(item: ReviewItem) -> str:
    """The judge that scored ``item`` (HHEM for items stored before judges had names)."""
    return item.judge or DEFAULT_JUDGE


def hhem_supported(item: ReviewItem) -> bool | None:
    """The judge's verdict at the threshold it ran with; None when the item was not scored."""
    if item.hhem_score is None or item.hhem_threshold is None:
        return None
    return item.hhem_score >= item.hhem_threshold


def _label(supported: bool) -> str:
    return SUPPORTED_LABEL if supported else UNSUPPORTED_LABEL


def judge_labels(item: ReviewItem, verdict: Verdict) -> tuple[str, str] | None:
    """``(judge, human)`` labels of one pair, for ``rag_review_judge_agreement_total``;
    None when the item has no score or the reviewer found no claim."""
    hhem, human = hhem_supported(item), human_supported(verdict)
    if hhem is None or human is None:
        return None
    return _label(hhem), _label(human)


@dataclass(frozen=True, slots=True)
class BestThreshold:
    """The observed score that, used as the threshold, agrees most with people."""

    threshold: float
    agreement: float  # share of the n pairs
    low: float  # bootstrap percentile interval of the threshold
    high: float
    resamples: int
    n: int


class AgreementMatrix:
    """Agreement, and precision and recall of "unsupported", from a matrix of (judge,
    human) labels, each supported or unsupported, to the number of pairs."""

    __slots__ = ()
    matrix: dict[tuple[str, str], int]
    n: int  # pairs in the matrix

    def count(self, judge: str, human: str) -> int:
        return self.matrix.get((judge, human), 0)

    @property
    def agreement(self) -> float | None:
        agreed = self.count(SUPPORTED_LABEL, SUPPORTED_LABEL)
        agreed += self.count(UNSUPPORTED_LABEL, UNSUPPORTED_LABEL)
        return agreed / self.n if self.n else None

    @property
    def precision(self) -> float | None:
        """Of the answers the judge called unsupported, the share people called unsupported."""
        flagged = self.count(UNSUPPORTED_LABEL, SUPPORTED_LABEL)
        hit = self.count(UNSUPPORTED_LABEL, UNSUPPORTED_LABEL)
        return hit / (hit + flagged) if hit + flagged else None

    @property
    def recall(self) -> float | None:
        """Of the answers people called unsupported, the share the judge called unsupported."""
        missed = self.count(SUPPORTED_LABEL, UNSUPPORTED_LABEL)
        hit = self.count(UNSUPPORTED_LABEL, UNSUPPORTED_LABEL)
        return hit / (hit + missed) if hit + missed else None


@dataclass(frozen=True, slots=True)
class JudgeCalibration(AgreementMatrix):
    """One judge against reviewers on the reviewed items it scored."""

    matrix: dict[tuple[str, str], int]  # (judge, human) -> pairs
    n: int  # pairs in the matrix
    no_claim: int  # scored items left out: the reviewer found no claim
    partly: int  # pairs counted as unsupported because the reviewer said "partly"
    unscored: int  # reviewed items no judge scored
    thresholds: tuple[float, ...]  # the thresholds the judge ran with, ascending
    best: BestThreshold | None
    judge: str = DEFAULT_JUDGE


@dataclass(frozen=True, slots=True)
class EvaluationAgreement(AgreementMatrix):
    """One evaluation compared with review against reviewers: a pass is "supported", a
    fail "unsupported", on the reviewed items that carry its result."""

    evaluation: str
    matrix: dict[tuple[str, str], int]  # (evaluation, human) -> pairs
    n: int
    no_claim: int  # items with a result left out: the reviewer found no claim
    partly: int  # pairs counted as unsupported because the reviewer said "partly"


def best_threshold(
    scores: npt.NDArray[np.float64], human: npt.NDArray[np.bool_]
) -> tuple[float, int]:
    """The observed score ``t`` whose rule ``score >= t: supported`` agrees with the most
    human verdicts, and that number; the smallest such score on a tie."""
    order = np.argsort(scores, kind="stable")
    ordered, supported = scores[order], human[order]
    # Before position i: predicted unsupported; from i on: predicted supported.
    supported_before = np.concatenate(([0], np.cumsum(supported)))
    unsupported_before = np.arange(len(ordered) + 1) - supported_before
    _, firsts = np.unique(ordered, return_index=True)
    agreed = unsupported_before[firsts] + (supported_before[-1] - supported_before[firsts])
    best = int(np.argmax(agreed))
    return float(ordered[firsts[best]]), int(agreed[best])


def _bootstrap(
    scores: npt.NDArray[np.float64],
    human: npt.NDArray[np.bool_],
    resamples: int,
    seed: int,
) -> tuple[float, float]:
    rng = np.random.default_rng(seed)
    n = len(scores)
    found = np.empty(resamples)
    for r in range(resamples):
        pick = rng.integers(0, n, n)
        found[r] = best_threshold(scores[pick], human[pick])[0]
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(found, [tail, 100 - tail])
    return float(low), float(high)


def judge_calibrations(
    reviewed: Reviewed, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED
) -> list[JudgeCalibration]:
    """One calibration per judge that scored a reviewed item, by name (HHEM alone when
    none did, so that a report always has the section)."""
    judges = {judge_of(item) for item, _ in reviewed if hhem_supported(item) is not None}
    return [
        judge_calibration(reviewed, resamples, seed, j) for j in sorted(judges or {DEFAULT_JUDGE})
    ]


def judge_calibration(
    reviewed: Reviewed,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    judge: str = DEFAULT_JUDGE,
) -> JudgeCalibration:
    """``judge``'s confusion matrix on the items it scored, and the best threshold with a
    seeded percentile bootstrap."""
    matrix: dict[tuple[str, str], int] = {}
    no_claim = partly = unscored = 0
    thresholds: set[float] = set()
    scores: list[float] = []
    human: list[bool] = []
    for item, verdict in reviewed:
        if item.hhem_score is None or item.hhem_threshold is None:
            unscored += 1
            continue
        if judge_of(item) != judge:
            continue
        labels = judge_labels(item, verdict)
        if labels is None:
            no_claim += 1
            continue
        matrix[labels] = matrix.get(labels, 0) + 1
        partly += verdict.supported == "partly"
        thresholds.add(item.hhem_threshold)
        scores.append(item.hhem_score)
        human.append(labels[1] == SUPPORTED_LABEL)
    best = None
    if scores:
        score_array, human_array = np.array(scores, dtype=np.float64), np.array(human)
        threshold, agreed = best_threshold(score_array, human_array)
        low, high = _bootstrap(score_array, human_array, resamples, seed)
        best = BestThreshold(threshold, agreed / len(scores), low, high, resamples, len(scores))
    return JudgeCalibration(
        matrix, len(scores), no_claim, partly, unscored, tuple(sorted(thresholds)), best, judge
    )


def evaluation_agreements(reviewed: Reviewed) -> list[EvaluationAgreement]:
    """One agreement per evaluation whose result a reviewed item carries, by name."""
    cells: dict[str, dict[tuple[str, str], int]] = {}
    no_claim: dict[str, int] = {}
    partly: dict[str, int] = {}
    for item, verdict in reviewed:
        human = human_supported(verdict)
        for name, outcome in item.evaluations:
            matrix = cells.setdefault(name, {})
            if human is None:
                no_claim[name] = no_claim.get(name, 0) + 1
                continue
            labels = (_label(outcome == "pass"), _label(human))
            matrix[labels] = matrix.get(labels, 0) + 1
            partly[name] = partly.get(name, 0) + (verdict.supported == "partly")
    return [
        EvaluationAgreement(
            name, matrix, sum(matrix.values()), no_claim.get(name, 0), partly.get(name, 0)
        )
        for name, matrix in sorted(cells.items())
    ]


def human_flagged(verdict: Verdict) -> bool:
    """The reviewer found the answer not supported, or incomplete."""
    return verdict.supported in ("no", "partly") or verdict.reason == "incomplete"


def signals(item: ReviewItem) -> frozenset[str]:
    """The implicit signals seen for an item: its feedback kinds and the follow-up stratum."""
    found = set(item.feedback)
    if FOLLOW_UP_SIGNAL in item.strata:
        found.add(FOLLOW_UP_SIGNAL)
    return frozenset(found)


@dataclass(frozen=True, slots=True)
class SignalAssociation:
    """One signal against the human "not supported or incomplete"."""

    kind: str
    # ((present and flagged, present and fine), (absent and flagged, absent and fine))
    table: tuple[tuple[int, int], tuple[int, int]]
    odds_ratio: float | None  # None when a cell is zero: not estimable
    low: float | None
    high: float | None

    @property
    def n(self) -> int:
        return sum(self.table[0]) + sum(self.table[1])

    @property
    def zero_cell(self) -> bool:
        return 0 in self.table[0] or 0 in self.table[1]


def association(kind: str, table: tuple[tuple[int, int], tuple[int, int]]) -> SignalAssociation:
    """The sample odds ratio of ``table`` and its 95% interval (scipy), unless a cell is 0."""
    if 0 in table[0] or 0 in table[1]:
        return SignalAssociation(kind, table, None, None, None)
    from scipy.stats.contingency import odds_ratio

    result = odds_ratio([list(table[0]), list(table[1])], kind="sample")
    interval = result.confidence_interval(confidence_level=CONFIDENCE)
    return SignalAssociation(
        kind, table, float(result.statistic), float(interval.low), float(interval.high)
    )


def signal_associations(reviewed: Reviewed) -> list[SignalAssociation]:
    """One association per signal seen on any reviewed item, by name."""
    seen = [(signals(item), human_flagged(verdict)) for item, verdict in reviewed]
    kinds = sorted(set().union(*(found for found, _ in seen)))
    results = []
    for kind in kinds:
        cells = [[0, 0], [0, 0]]
        for found, flagged in seen:
            cells[kind not in found][not flagged] += 1
        results.append(association(kind, ((cells[0][0], cells[0][1]), (cells[1][0], cells[1][1]))))
    return results
