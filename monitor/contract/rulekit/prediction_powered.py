"""A judge's pass share corrected by human review: prediction-powered inference (PPI++).

A judge (HHEM, an LLM judge, an evaluator) scores many answers; people review a random
sample of them blind. The judge's own pass share is biased by its errors: a judge that
passes 8% of unsupported answers reports a share about that much too high, and a Wilson
bound around it is tight around the wrong value. The reviewed share alone is unbiased but
rests on few items. Prediction-powered inference (Angelopoulos et al. 2023; PPI++,
Angelopoulos, Duchi and Zrnic 2024) combines both:

    share = human share on the reviewed items
          + lambda * (judge share on all judged - judge share on the reviewed items)

The second term is the judge's view of how the reviewed items differ from all traffic;
``lambda`` in [0, 1] weighs it by how well the judge tracks people (0 when it does not
at all: the review-only estimate; power tuning picks the value of least variance). The
estimate is unbiased whatever the judge's errors, and its interval is narrower than the
review-only one when the judge agrees with people.

Every quantity is a count over binary verdicts (pass: the judge's score at or above its
threshold, or the evaluation's pass rule; a person's ``yes``; ``no`` and ``partly`` fail,
``no_claim`` is left out), so the same estimate is computed here in Python (the review
report, the tests) and in PromQL from the counters (the recording rules the alerts and
the dashboard read: ``monitor.contract.rulekit.corrected_rules``). Only the review's ``random``
stratum enters: the other strata oversample thumbs-down and low scores by design and say
nothing of the population.

The point estimate and the weight are PPI++'s. The interval is PPI++'s normal interval with
one change: the variance of the reviewed items' term is estimated with half a count added
to each cell of the judge x person table (Agresti and Min's adjusted interval for paired
proportions). With a good judge that term rests on the few items where judge and person
disagree, a handful in 200 reviews, and the plain estimate is then too small as often as
not: in a simulation of 200 reviews of a service at 0.85 with a judge wrong on 3-8% of
answers, the plain 90% interval covered the truth in 87.5% of windows, the adjusted one
in 90% (tests/unit/contract/test_prediction_powered.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from monitor.contract.rulekit.evidence import wilson

RANDOM_STRATUM = "random"
# Agresti and Min's half count per cell of the paired table, in the rectifier's variance.
PSEUDO_COUNT = 0.5


@dataclass(frozen=True, slots=True)
class ReviewedPairs:
    """Reviewed items of the random stratum that the judge also scored, counted by the
    judge's verdict and the person's (pass or fail)."""

    both_pass: int = 0
    judge_pass_human_fail: int = 0
    judge_fail_human_pass: int = 0
    both_fail: int = 0

    @property
    def n(self) -> int:
        return (
            self.both_pass
            + self.judge_pass_human_fail
            + self.judge_fail_human_pass
            + self.both_fail
        )

    @property
    def human_share(self) -> float:
        return (self.both_pass + self.judge_fail_human_pass) / self.n

    @property
    def judge_share(self) -> float:
        return (self.both_pass + self.judge_pass_human_fail) / self.n

    @property
    def both_share(self) -> float:
        return self.both_pass / self.n

    @classmethod
    def of(cls, pairs: list[tuple[bool, bool]]) -> ReviewedPairs:
        """Counts of ``(judge passed, person passed)`` pairs."""
        cells = {(True, True): 0, (True, False): 0, (False, True): 0, (False, False): 0}
        for pair in pairs:
            cells[pair] += 1
        return cls(
            cells[(True, True)], cells[(True, False)], cells[(False, True)], cells[(False, False)]
        )


@dataclass(frozen=True, slots=True)
class Estimate:
    """A share with its standard error (normal approximation)."""

    share: float
    stderr: float
    lam: float | None = None  # the corrected estimate's power-tuning weight

    def interval(self, z: float) -> tuple[float, float]:
        return self.share - z * self.stderr, self.share + z * self.stderr


def review_only(pairs: ReviewedPairs) -> Estimate:
    """The human pass share of the reviewed items alone, the classical estimate."""
    share = pairs.human_share
    return Estimate(share, math.sqrt(share * (1 - share) / pairs.n))


def judge_only(judged: float, passed: float, z: float) -> tuple[float, float, float]:
    """The judge's pass share of all judged answers and its two-sided Wilson interval
    at ``z``: what the alerts read without reviews."""
    share = passed / judged
    return share, wilson(share, judged, z, "lower"), wilson(share, judged, z, "upper")


def power_tuning(judged: float, judge_share: float, pairs: ReviewedPairs) -> float:
    """PPI++'s weight of least variance for a mean: the judge/human covariance on the
    reviewed items over the judge's variance on all items, inflated by ``1 + n / N``,
    clipped to [0, 1]; 0 when the judge's verdicts do not vary."""
    n = pairs.n
    covariance = pairs.both_share - pairs.human_share * pairs.judge_share
    pooled = (judge_share * judged + pairs.judge_share * n) / (judged + n)
    variance = pooled * (1 - pooled) * (judged + n) / (judged + n - 1)
    if variance <= 0:
        return 0.0
    return min(1.0, max(0.0, covariance / ((1 + n / judged) * variance)))


def corrected(
    judged: float,
    passed: float,
    pairs: ReviewedPairs,
    pseudo_count: float = PSEUDO_COUNT,
    lam: float | None = None,
) -> Estimate:
    """The prediction-powered pass share from ``passed`` of ``judged`` answers the judge
    passed and the reviewed ``pairs``, with its standard error (``pseudo_count`` 0: PPI++'s
    plain one). ``lam`` None: power-tuned; 1: the judge's share less its bias on the
    reviewed items (``debiased``, what the pages test)."""
    judge_share = passed / judged
    if lam is None:
        lam = power_tuning(judged, judge_share, pairs)
    share = pairs.human_share + lam * (judge_share - pairs.judge_share)
    imputed = lam * lam * judge_share * (1 - judge_share) / judged
    return Estimate(share, math.sqrt(imputed + rectifier_variance(pairs, lam, pseudo_count)), lam)


def rectifier_variance(
    pairs: ReviewedPairs, lam: float, pseudo_count: float = PSEUDO_COUNT
) -> float:
    """The variance of the reviewed items' mean rectifier (human - ``lam`` * judge), from
    its mean and mean square over the table with ``pseudo_count`` added to each cell."""
    total = pairs.n + 4 * pseudo_count
    human = (pairs.n * pairs.human_share + 2 * pseudo_count) / total
    judge = (pairs.n * pairs.judge_share + 2 * pseudo_count) / total
    both = (pairs.both_pass + pseudo_count) / total
    mean = human - lam * judge
    square = human - 2 * lam * both + lam * lam * judge
    return max(0.0, square - mean * mean) / pairs.n


def debiased(judged: float, passed: float, pairs: ReviewedPairs) -> Estimate:
    """The judge's pass share of the window less its bias on the reviewed items: the
    prediction-powered share at weight 1, which moves with the window's judged answers."""
    return corrected(judged, passed, pairs, lam=1.0)


def debiased_upper_bound(judged: float, passed: float, pairs: ReviewedPairs, z: float) -> float:
    """The upper bound at ``z`` of the debiased share, what the pages test. The window's
    share takes Agresti and Coull's form at the same ``z`` (``z^2 / 2`` passes and as many
    fails added, the variance over ``judged + z^2``): the plain ``p (1 - p) / n`` is 0 at a
    share of 0 or 1, so two judged answers that both fail would leave the bias term alone
    to bound the share, and a healthy service at night traffic would be paged. With many
    judged answers the two forms agree."""
    adjusted = (passed + z * z / 2) / (judged + z * z)
    share = adjusted - (pairs.judge_share - pairs.human_share)
    return share + z * math.sqrt(
        adjusted * (1 - adjusted) / (judged + z * z) + rectifier_variance(pairs, 1.0)
    )


def judge_bias(pairs: ReviewedPairs) -> Estimate:
    """The judge's pass share minus the people's on the same reviewed items (paired)."""
    bias = pairs.judge_share - pairs.human_share
    disagree = pairs.judge_share + pairs.human_share - 2 * pairs.both_share
    return Estimate(bias, math.sqrt(max(0.0, disagree - bias * bias) / pairs.n))


def effective_reviews(pairs: ReviewedPairs, estimate: Estimate) -> float:
    """How many random reviews alone would give ``estimate``'s standard error."""
    share = pairs.human_share
    if estimate.stderr <= 0:
        return math.inf
    return share * (1 - share) / estimate.stderr**2
