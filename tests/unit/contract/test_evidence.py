"""The false-alert budget's derivation (monitor.contract.rulekit.evidence) against a simulated statistic."""

from __future__ import annotations

import math

import numpy as np
import pytest

from monitor.contract.rulekit.evidence import false_firings_per_week, wilson, z_for

WEEK_MINUTES = 10_080


@pytest.mark.parametrize(
    ("window_minutes", "z"), [(30, 3.0), (60, 3.5), (360, 3.0)], ids=["30m", "1h", "6h"]
)
def test_crossing_rate_matches_a_simulated_sliding_window(window_minutes: int, z: float) -> None:
    """Up-crossings of z by a standardised sliding-window sum of white noise, evaluated each
    minute over 100 seeded weeks, are within 25% of the derived weekly rate."""
    rng = np.random.default_rng(7)
    steps = 100 * WEEK_MINUTES
    sums = np.cumsum(rng.standard_normal(steps + window_minutes))
    statistic = (sums[window_minutes:] - sums[:-window_minutes]) / math.sqrt(window_minutes)
    above = statistic > z
    observed = np.sum(above[1:] & ~above[:-1]) / 100
    expected = false_firings_per_week(z, window_minutes * 60, 60)
    assert observed == pytest.approx(expected, rel=0.25)


def test_z_meets_the_budget_and_falls_with_longer_windows() -> None:
    """z_for returns a z whose crossings fit the budget; a longer window or a larger budget
    needs a lower z."""
    z = z_for(0.25, "1h", "1m")
    assert false_firings_per_week(z, 3600, 60) <= 0.25 < false_firings_per_week(z - 0.02, 3600, 60)
    assert z_for(0.25, "6h", "1m") < z < z_for(0.25, "30m", "1m")
    assert z_for(1.0, "1h", "1m") < z


def test_wilson_bounds_widen_on_little_evidence() -> None:
    """The same share of 0.75 is bounded within 0.85 on 20 answers but not on 2,000."""
    assert wilson(0.75, 20, 3.0, "upper") > 0.85
    assert wilson(0.75, 2000, 3.0, "upper") < 0.79
    assert wilson(0.0, 50, 3.0, "lower") == 0.0
    assert wilson(0.75, 2000, 3.0, "lower") < 0.75 < wilson(0.75, 2000, 3.0, "upper")
