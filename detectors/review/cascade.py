"""A judge cascade's tiers against reviewers, for ``rag-monitor report review``.

A cascade (detectors.faithfulness judge: cascade) stores each tier's score with the item
(``ReviewItem.tiers``): the first judge's on every answer, with whether it fell in the
uncertain band, and the LLM judge's on the answers it was sent. Each tier's verdict is
its score against the item's threshold, read against the reviewer's like a judge's
(``calibration.py``: 'partly' is unsupported, 'no claim' left out). Inside the band
against outside it, and the first judge's agreement by its score, are the evidence for
the band: widen it over scores where the first judge disagrees with reviewers and the
second agrees, narrow it where the first does as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from detectors.review.calibration import (
    SUPPORTED_LABEL,
    UNSUPPORTED_LABEL,
    AgreementMatrix,
    Reviewed,
    human_supported,
    judge_of,
)
from monitor.contract.report_tables import Table

FIRST_TIER, SECOND_TIER = 1, 2
BIN_WIDTH = 0.1  # the first judge's scores in bins of a tenth


class TierLike(Protocol):
    """One tier's verdict on an item, as ``ReviewItem.tiers`` holds it."""

    @property
    def judge(self) -> str: ...

    @property
    def score(self) -> float | None: ...

    @property
    def escalated(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class TierAgreement(AgreementMatrix):
    """One tier of a cascade against reviewers, on the reviewed items whose first score
    was inside (``in_band``) or outside the uncertain band."""

    cascade: str  # the cascade's identity (the item's judge)
    tier: int  # FIRST_TIER or SECOND_TIER
    judge: str  # the tier's judge (its identity)
    in_band: bool
    matrix: dict[tuple[str, str], int]  # (tier's verdict, human) -> pairs
    n: int


@dataclass(frozen=True, slots=True)
class FirstScoreBin:
    """A cascade's reviewed items whose first score is in [low, high): how often each tier
    agreed with the reviewer there, and how many the first sent on."""

    cascade: str
    low: float
    high: float
    n: int  # items the first tier scored (the reviewer found a claim)
    first_agreed: int
    escalated: int  # of the n, in the band
    second_n: int  # of the n, scored by the second tier
    second_agreed: int

    @property
    def first_agreement(self) -> float | None:
        return self.first_agreed / self.n if self.n else None

    @property
    def second_agreement(self) -> float | None:
        return self.second_agreed / self.second_n if self.second_n else None


def _tier_pairs(
    reviewed: Reviewed,
) -> list[tuple[str, float, Sequence[TierLike], bool]]:
    """(cascade, threshold, tiers, human supported) of each reviewed item with tiers, a
    threshold and a claim."""
    found = []
    for item, verdict in reviewed:
        tiers: Sequence[TierLike] = item.tiers
        human = human_supported(verdict)
        if not tiers or human is None or item.hhem_threshold is None:
            continue
        found.append((judge_of(item), item.hhem_threshold, tiers, human))
    return found


def tier_agreements(reviewed: Reviewed) -> list[TierAgreement]:
    """Each tier of each cascade against reviewers, inside and outside the band: by
    cascade, tier, then inside before outside."""
    cells: dict[tuple[str, int, str, bool], dict[tuple[str, str], int]] = {}
    for cascade, threshold, tiers, human in _tier_pairs(reviewed):
        in_band = tiers[0].escalated
        for tier, verdict in enumerate(tiers[:SECOND_TIER], start=FIRST_TIER):
            if verdict.score is None:
                continue
            matrix = cells.setdefault((cascade, tier, verdict.judge, in_band), {})
            labels = (_label(verdict.score >= threshold), _label(human))
            matrix[labels] = matrix.get(labels, 0) + 1
    ordered = sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1], not kv[0][3], kv[0][2]))
    return [
        TierAgreement(cascade, tier, judge, in_band, matrix, sum(matrix.values()))
        for (cascade, tier, judge, in_band), matrix in ordered
    ]


def first_score_bins(reviewed: Reviewed, width: float = BIN_WIDTH) -> list[FirstScoreBin]:
    """Each cascade's reviewed items by the first judge's score, in bins of ``width`` (the
    last holds 1.0); bins without an item are left out."""
    count = round(1 / width)
    tallies: dict[tuple[str, int], list[int]] = {}
    for cascade, threshold, tiers, human in _tier_pairs(reviewed):
        first = tiers[0].score
        if first is None:
            continue
        tally = tallies.setdefault((cascade, min(int(first / width), count - 1)), [0] * 5)
        tally[0] += 1
        tally[1] += (first >= threshold) == human
        tally[2] += tiers[0].escalated
        second = tiers[1].score if len(tiers) > 1 else None
        if second is not None:
            tally[3] += 1
            tally[4] += (second >= threshold) == human
    return [
        FirstScoreBin(cascade, round(b * width, 6), round((b + 1) * width, 6), *tally)
        for (cascade, b), tally in sorted(tallies.items())
    ]


def _label(supported: bool) -> str:
    return SUPPORTED_LABEL if supported else UNSUPPORTED_LABEL


def _share(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


TIER_HEAD = [
    "cascade",
    "tier",
    "judge",
    "first score",
    "n",
    "agreement",
    "precision of 'unsupported'",
    "recall of 'unsupported'",
]
TIER_NOTE = (
    "Each tier's verdict (its score against the threshold) against the reviewer's, on the "
    "reviewed items a judge cascade scored; 'in band': the first judge's score was in the "
    "uncertain band, so the answer went on to the second judge (unless the budget or the "
    "rate refused it: then the second tier has no verdict). 'partly' counts as unsupported "
    "and 'no claim' is left out, as for a judge."
)
BIN_HEAD = [
    "cascade",
    "first score",
    "n",
    "first agreed",
    "in band",
    "second judged",
    "second agreed",
]
BIN_NOTE = (
    "Set the band from this table: it should cover the scores where the first judge agrees "
    "with reviewers clearly less than the second judge does, and no more, since each answer "
    "in it costs an LLM judgement. A score bin outside the band has no second verdict: "
    "widen the band over it for a while to measure the second judge there. A share on a "
    "few items says little, and the low_faithfulness stratum over-represents answers the "
    "cascade scored low, which tilts a bin towards the judges' 'unsupported' verdicts: "
    "compare the two tiers within a bin, and bins with each other, rather than reading a "
    "share as the rate in production."
)


def _tier_row(tier: TierAgreement) -> list[str]:
    return [
        tier.cascade,
        "first" if tier.tier == FIRST_TIER else "second",
        tier.judge,
        "in band" if tier.in_band else "outside band",
        str(tier.n),
        *(_share(v) for v in (tier.agreement, tier.precision, tier.recall)),
    ]


def _bin_row(score_bin: FirstScoreBin) -> list[str]:
    return [
        score_bin.cascade,
        f"[{score_bin.low:g}, {score_bin.high:g})",
        str(score_bin.n),
        _share(score_bin.first_agreement),
        str(score_bin.escalated),
        str(score_bin.second_n),
        _share(score_bin.second_agreement),
    ]


def cascade_tables(tiers: list[TierAgreement], bins: list[FirstScoreBin]) -> list[Table]:
    """The review report's cascade sections, only when reviewed items carry tiers."""
    if not tiers:
        return []
    return [
        ("Cascade tiers against reviewers", TIER_HEAD, [_tier_row(t) for t in tiers], [TIER_NOTE]),
        (
            "Cascade: the first judge's agreement by its score",
            BIN_HEAD,
            [_bin_row(b) for b in bins],
            [BIN_NOTE],
        ),
    ]
