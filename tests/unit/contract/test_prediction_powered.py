"""The judge's pass share corrected by reviews (monitor/contract/rulekit/prediction_powered.py):
a seeded simulation of a biased judge, and the estimates against ppi-python's."""

from __future__ import annotations

import math

import numpy as np
import ppi_py
import pytest

from monitor.contract.rulekit.evidence import wilson
from monitor.contract.rulekit.prediction_powered import (
    ReviewedPairs,
    corrected,
    debiased,
    debiased_upper_bound,
    effective_reviews,
    judge_bias,
    judge_only,
    review_only,
)

TRUTH = 0.85  # the share of supported answers
FALSE_PASS = 0.08  # the judge passes 8% of unsupported answers
FALSE_FAIL = 0.03  # and fails 3% of supported ones
JUDGED, REVIEWED, REPETITIONS = 20_000, 200, 1_000
Z90 = 1.6448536269514722  # two-sided 90%


def _population(rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
    """(person passes, judge passes) for ``size`` answers of the simulated service."""
    supported = rng.random(size) < TRUTH
    judge = np.where(supported, rng.random(size) >= FALSE_FAIL, rng.random(size) < FALSE_PASS)
    return supported, judge


def _draw(rng: np.random.Generator) -> tuple[int, ReviewedPairs, np.ndarray, np.ndarray]:
    """One window: the judge's passes of all judged answers and a random review of them."""
    supported, judge = _population(rng, JUDGED)
    reviewed = rng.choice(JUDGED, REVIEWED, replace=False)
    pairs = ReviewedPairs.of(
        list(zip(judge[reviewed].tolist(), supported[reviewed].tolist(), strict=True))
    )
    return int(judge.sum()), pairs, supported[reviewed].astype(float), judge.astype(float)


def test_corrected_interval_covers_the_truth_and_the_judge_only_one_does_not() -> None:
    """Over 1,000 seeded windows the corrected 90% interval covers the true share in 88-92%
    of them, the judge-only interval in under 10%, and the corrected interval is narrower
    than the review-only one every time."""
    rng = np.random.default_rng(20261204)
    corrected_covers = judge_covers = narrower = 0
    for _ in range(REPETITIONS):
        passed, pairs, _, _ = _draw(rng)
        low, high = corrected(JUDGED, passed, pairs).interval(Z90)
        corrected_covers += low <= TRUTH <= high
        _, judge_low, judge_high = judge_only(JUDGED, passed, Z90)
        judge_covers += judge_low <= TRUTH <= judge_high
        narrower += corrected(JUDGED, passed, pairs).stderr < review_only(pairs).stderr
    assert 0.88 <= corrected_covers / REPETITIONS <= 0.92
    assert judge_covers / REPETITIONS < 0.10
    assert narrower == REPETITIONS


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_estimates_equal_ppi_python(seed: int) -> None:
    """The point estimate and, without the half counts, the 90% interval equal
    ppi-python's PPI++ (power-tuned) on the same verdicts to 1e-6; the review-only interval
    equals its classical one."""
    rng = np.random.default_rng(seed)
    passed, pairs, human, judge_all = _draw(rng)
    judge_reviewed = np.array(
        [1.0] * pairs.both_pass
        + [1.0] * pairs.judge_pass_human_fail
        + [0.0] * pairs.judge_fail_human_pass
        + [0.0] * pairs.both_fail
    )
    human_sorted = np.array(
        [1.0] * pairs.both_pass
        + [0.0] * pairs.judge_pass_human_fail
        + [1.0] * pairs.judge_fail_human_pass
        + [0.0] * pairs.both_fail
    )
    assert human_sorted.sum() == human.sum()
    ours = corrected(JUDGED, passed, pairs, pseudo_count=0)
    assert corrected(JUDGED, passed, pairs).share == ours.share
    point = ppi_py.ppi_mean_pointestimate(human_sorted, judge_reviewed, judge_all)
    low, high = ppi_py.ppi_mean_ci(human_sorted, judge_reviewed, judge_all, alpha=0.1)
    assert ours.share == pytest.approx(float(np.squeeze(point)), abs=1e-6)
    assert ours.interval(Z90)[0] == pytest.approx(float(np.squeeze(low)), abs=1e-6)
    assert ours.interval(Z90)[1] == pytest.approx(float(np.squeeze(high)), abs=1e-6)
    classical_low, classical_high = ppi_py.classical_mean_ci(human_sorted, alpha=0.1)
    assert review_only(pairs).interval(Z90)[0] == pytest.approx(float(classical_low), abs=1e-6)
    assert review_only(pairs).interval(Z90)[1] == pytest.approx(float(classical_high), abs=1e-6)


def test_a_judge_that_tells_nothing_gets_weight_zero() -> None:
    """A judge passing everything carries no information: the corrected estimate is the
    review-only one."""
    pairs = ReviewedPairs(both_pass=150, judge_pass_human_fail=50)
    estimate = corrected(1_000, 1_000, pairs)
    assert estimate.lam == 0.0
    assert estimate.share == review_only(pairs).share == 0.75
    plain = corrected(1_000, 1_000, pairs, pseudo_count=0)
    assert plain.stderr == pytest.approx(review_only(pairs).stderr)


def test_bias_and_effective_reviews() -> None:
    """The bias is the judge's pass share minus the people's on the same items, with a
    paired standard error; a judge that agrees with people buys effective reviews."""
    pairs = ReviewedPairs(
        both_pass=160, judge_pass_human_fail=16, judge_fail_human_pass=4, both_fail=20
    )
    bias = judge_bias(pairs)
    assert bias.share == pytest.approx((176 - 164) / 200)
    differences = np.array([0.0] * 180 + [1.0] * 16 + [-1.0] * 4)
    assert bias.stderr == pytest.approx(differences.std() / math.sqrt(200))
    estimate = corrected(20_000, 17_000, pairs)
    assert effective_reviews(pairs, estimate) > pairs.n


def test_the_pages_share_moves_with_the_window_as_the_judge_does() -> None:
    """The debiased share the pages test (weight 1) moves by as much as the judge's share
    of the window moves; the power-tuned share, leaning on weeks of reviews when the
    judge tracks people weakly, moves by its weight alone: an incident of the last hour
    must reach the page."""
    pairs = ReviewedPairs(
        both_pass=199, judge_pass_human_fail=11, judge_fail_human_pass=11, both_fail=7
    )
    before, after = (2_300, 0.92 * 2_300), (2_300, 0.80 * 2_300)
    moved = debiased(*before, pairs).share - debiased(*after, pairs).share
    assert moved == pytest.approx(0.12)
    tuned = corrected(*before, pairs)
    assert tuned.lam is not None
    assert tuned.lam < 0.5
    assert corrected(*before, pairs).share - corrected(*after, pairs).share < 0.5 * moved
    assert debiased(*after, pairs).share == pytest.approx(
        0.80 - (pairs.judge_share - pairs.human_share)
    )


def test_the_pages_bound_is_never_tighter_than_the_windows_evidence() -> None:
    """With reviews that find no bias, the debiased upper bound is at least the judge's own
    Wilson bound at every count from 1 to 60 judged answers and every pass count (the
    Agresti-Coull interval contains Wilson's, and the reviews' variance only widens it):
    two judged answers that both fail leave it near 0.89, not at the bias term alone."""
    pairs = ReviewedPairs(
        both_pass=180, judge_pass_human_fail=7, judge_fail_human_pass=7, both_fail=6
    )
    z = 4.03
    for judged in range(1, 61):
        for passed in range(judged + 1):
            own = wilson(passed / judged, judged, z, "upper")
            assert debiased_upper_bound(judged, passed, pairs, z) >= own - 1e-12
    plain = debiased(2, 0, pairs)
    assert plain.share + z * plain.stderr < 0.1  # the plain form's bound
    assert debiased_upper_bound(2, 0, pairs, z) > 0.85


def test_the_pages_bound_is_the_plain_one_on_many_judged_answers() -> None:
    """On 100,000 judged answers the Agresti-Coull form adds nothing: the bound equals
    the debiased share plus z standard errors to 1e-4."""
    pairs = ReviewedPairs(
        both_pass=180, judge_pass_human_fail=10, judge_fail_human_pass=4, both_fail=6
    )
    plain = debiased(100_000, 92_000, pairs)
    assert debiased_upper_bound(100_000, 92_000, pairs, 4.03) == pytest.approx(
        plain.share + 4.03 * plain.stderr, abs=1e-4
    )
