"""The pass shares the review can correct, as ``rag-monitor report review`` shows them:
the judge's own, the reviewers' alone, and the two combined (prediction-powered,
``monitor.contract.rulekit.prediction_powered``), each with its 90% interval.

The reviewed side comes from the store: the items of the ``random`` stratum reviewed
within ``guardrails.review_correction.window`` that the judge scored (for faithfulness)
or that carry an evaluation's result (for each evaluation compared with review), exactly
the verdicts ``rag_review_*_agreement_total{stratum="random"}`` counted. The judged side,
every answer the judge scored in a window, lives in Prometheus alone: the report reads
the recordings the alerts read (``--prometheus URL``, ``--window``), so that the report,
the rules and the estimator give one number. Faithfulness has a row per judge identity
(``faithfulness (<judge>)``): each judge is corrected by the reviews of its own verdicts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from detectors.review.calibration import Reviewed, hhem_supported, human_supported, judge_of
from monitor.contract.report_tables import Table
from monitor.contract.rulekit.prediction_powered import (
    RANDOM_STRATUM,
    Estimate,
    ReviewedPairs,
    corrected,
    effective_reviews,
    judge_bias,
    judge_only,
    review_only,
)

Z90 = 1.6448536269514722  # two-sided 90%
FAITHFULNESS = "faithfulness"
# The recordings the alerts read, per job: (judged count, judge's pass share) of a window.
FAITHFULNESS_JUDGED = ("rag:faithfulness_scored:increase{w}", "rag:faithfulness_pass:ratio_rate{w}")
EVALUATION_JUDGED = ("rag:evaluation_judged:increase{w}", "rag:evaluation_pass:ratio_rate{w}")

# (answers the judge judged in the window, of which it passed): Prometheus's increases,
# not always whole numbers.
Judged = tuple[float, float]


@dataclass(frozen=True, slots=True)
class PassShare:
    """One judge's (faithfulness, or an evaluation's) three estimates."""

    name: str
    pairs: ReviewedPairs
    judged: Judged | None  # None: not read (no --prometheus), or nothing judged

    @property
    def review_only(self) -> Estimate | None:
        return review_only(self.pairs) if self.pairs.n else None

    @property
    def judge_only(self) -> tuple[float, float, float] | None:
        if self.judged is None:
            return None
        return judge_only(*self.judged, Z90)

    @property
    def corrected(self) -> Estimate | None:
        if self.judged is None or not self.pairs.n:
            return None
        return corrected(*self.judged, self.pairs)

    @property
    def bias(self) -> Estimate | None:
        return judge_bias(self.pairs) if self.pairs.n else None


def random_pairs(reviewed: Reviewed, since: float) -> dict[str, ReviewedPairs]:
    """Per faithfulness judge (``faithfulness_row``) and per compared evaluation, the
    (judge passed, person passed) counts of the random stratum's items reviewed at or
    after ``since``."""
    cells: dict[str, list[tuple[bool, bool]]] = {}
    for item, verdict in reviewed:
        human = human_supported(verdict)
        if RANDOM_STRATUM not in item.strata or verdict.reviewed_at < since or human is None:
            continue
        judge = hhem_supported(item)
        if judge is not None:
            cells.setdefault(faithfulness_row(judge_of(item)), []).append((judge, human))
        for name, outcome in item.evaluations:
            cells.setdefault(name, []).append((outcome == "pass", human))
    return {name: ReviewedPairs.of(pairs) for name, pairs in cells.items()}


Query = Callable[[str], list[tuple[dict[str, str], float]]]


def judged_counts(query: Query, window: str, job: str) -> dict[str, Judged]:
    """(judged, passed) of ``window`` per judge and evaluation from the recordings."""
    counts: dict[str, Judged] = {}
    for recordings, key in ((FAITHFULNESS_JUDGED, None), (EVALUATION_JUDGED, "evaluation")):
        count_name, share_name = (name.format(w=window) for name in recordings)
        shares = {
            _key(labels, key): value for labels, value in query(share_name) if _ours(labels, job)
        }
        for labels, value in query(count_name):
            name = _key(labels, key)
            if _ours(labels, job) and name in shares and value > 0 and math.isfinite(shares[name]):
                counts[name] = (value, shares[name] * value)
    return counts


def faithfulness_row(judge: str) -> str:
    """The row of one faithfulness judge (its identity)."""
    return f"{FAITHFULNESS} ({judge})"


def _key(labels: dict[str, str], key: str | None) -> str:
    return faithfulness_row(labels.get("judge", "")) if key is None else labels.get(key, "")


def _ours(labels: dict[str, str], job: str) -> bool:
    return labels.get("job") == job


def pass_shares(
    pairs: dict[str, ReviewedPairs], judged: dict[str, Judged] | None
) -> list[PassShare]:
    """Faithfulness first, a row per judge that has reviews or judged answers, then the
    evaluations by name."""
    judges = {name for name in {*pairs, *(judged or {})} if name.startswith(f"{FAITHFULNESS} (")}
    names = [*sorted(judges), *sorted(set(pairs) - judges)]
    return [
        PassShare(
            name, pairs.get(name, ReviewedPairs()), None if judged is None else judged.get(name)
        )
        for name in names
    ]


# --- the report's table -------------------------------------------------------------------

SHARE_HEAD = [
    "judge",
    "judged",
    "random reviews",
    "judge only",
    "reviews only",
    "corrected",
    "weight",
    "effective reviews",
    "judge bias",
]


def interval_text(estimate: Estimate | None) -> str:
    if estimate is None:
        return "n/a"
    low, high = estimate.interval(Z90)
    return f"{estimate.share:.1%} [{low:.1%}, {high:.1%}]"


def _share_row(share: PassShare) -> list[str]:
    judge = share.judge_only
    corrected = share.corrected
    effective = None if corrected is None else effective_reviews(share.pairs, corrected)
    return [
        share.name,
        "n/a" if share.judged is None else f"{share.judged[0]:.0f}",
        str(share.pairs.n),
        "n/a" if judge is None else f"{judge[0]:.1%} [{judge[1]:.1%}, {judge[2]:.1%}]",
        interval_text(share.review_only),
        interval_text(corrected),
        "n/a" if corrected is None or corrected.lam is None else f"{corrected.lam:.2f}",
        "n/a" if effective is None else f"{effective:.0f} ({effective / share.pairs.n:.1f}x)",
        interval_text(share.bias),
    ]


def _share_notes(windows: tuple[str, str] | None) -> list[str]:
    notes = [
        "Pass shares with their 90% intervals. Judge only: the judge's own share of every "
        "answer it judged (Wilson interval), what the alerts read while reviews are few. "
        "Reviews only: the reviewers' share of the random stratum's items. Corrected: the "
        "two combined (prediction-powered inference, PPI++): unbiased whatever the judge's "
        "errors, and narrower than the reviews alone when the judge agrees with people. "
        "Weight: how much the judge's view counts (0: not at all). Effective reviews: how many "
        "random reviews alone would give the corrected interval. Judge bias: the judge's pass "
        "share minus the reviewers' on the same items.",
    ]
    if windows is None:
        notes.append(
            "Run with --prometheus URL to read the answers the judge judged: the judge-only and "
            "corrected shares need them."
        )
    else:
        judged, review = windows
        notes.append(f"Judged answers of the last {judged}; random reviews of the last {review}.")
    return notes


def share_table(shares: list[PassShare], windows: tuple[str, str] | None) -> Table:
    """The report's section: one row per judge, its three estimates and what they rest on
    (``windows``: the judged and review windows; None when the judged were not read)."""
    return (
        "Pass shares: the judge's, the reviewers', corrected",
        SHARE_HEAD,
        [_share_row(share) for share in shares],
        _share_notes(windows),
    )
