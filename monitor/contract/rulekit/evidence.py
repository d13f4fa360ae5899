"""How sure an alert must be before it fires: bounds derived from a false-alert budget.

``guardrails.false_alerts_per_week`` says how many false firings a week one alert may
cost a service that is exactly at its guardrail. An alert's statistic is a ratio over a
sliding window, re-evaluated every ``evaluation_interval``; standardised, it moves like
a Gaussian random walk whose correlation between two evaluations is ``1 - interval /
window`` (neighbouring windows share most of their events). Such a statistic, at an
evaluation below ``z``, is above it at the next one with probability about
``pdf(z) * sqrt(interval / (pi * window))`` (the bivariate normal near the diagonal),
and never more often than it is above ``z`` at all. Each such crossing is a new
firing, since a rough walk hovering at the level crosses it again and again; so the
expected firings a week are ``evaluations a week * that probability``, and ``z_for``
inverts it for the budget. A longer window crosses less often and gets a lower ``z``.
(A simulated walk checks this: tests/unit/contract/test_evidence.py.)

The bound itself is Wilson's score interval of a binomial share, computed in PromQL from
the recorded share and the recorded count it rests on: unlike a point value it is wide
on ten scored answers and narrow on ten thousand, so the same rule suits night and day.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from monitor.contract.durations import parse_duration
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.rulekit.promql import ratio, sum_increase, sum_rate

WEEK_S = 7 * 86_400.0
Side = Literal["lower", "upper"]


def normal_tail(z: float) -> float:
    """P(Z > z) for a standard normal Z."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def false_firings_per_week(z: float, window_s: float, interval_s: float) -> float:
    """Expected up-crossings of ``z`` a week by a standardised sliding-window statistic
    evaluated every ``interval_s``."""
    density = math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    per_evaluation = min(density * math.sqrt(interval_s / (math.pi * window_s)), normal_tail(z))
    return WEEK_S / interval_s * per_evaluation


def z_for(budget_per_week: float, window: str, interval: str) -> float:
    """The smallest ``z`` (to 0.01, rounded up) whose crossings stay within the budget."""
    window_s, interval_s = parse_duration(window), parse_duration(interval)
    low, high = 0.5, 12.0
    for _ in range(60):
        middle = (low + high) / 2
        if false_firings_per_week(middle, window_s, interval_s) > budget_per_week:
            low = middle
        else:
            high = middle
    return math.ceil(high * 100) / 100


def window_z(
    guardrails: GuardrailsConfig,
    severity: str,
    windows: list[str],
    sides: int = 1,
    series: int = 1,
) -> list[tuple[str, float]]:
    """(window, z) of an alert that tests ``windows`` (on ``sides`` sides each) of
    ``series`` series (slices): the severity's budget is shared equally among them all, so
    that more series do not mean more false alerts."""
    share = getattr(guardrails.false_alerts_per_week, severity) / (len(windows) * sides * series)
    interval = guardrails.evaluation_interval
    return [(window, z_for(share, window, interval)) for window in windows]


def hold_for(guardrails: GuardrailsConfig) -> str:
    """``for`` of an evidence alert: two evaluations, so one odd scrape cannot fire it."""
    seconds = 2 * parse_duration(guardrails.evaluation_interval)
    return f"{seconds / 60:g}m" if seconds % 60 == 0 else f"{seconds:g}s"


def confidence(z: float) -> str:
    """The one-sided confidence level of ``z`` with two significant digits of its
    complement, for descriptions: ``99.98%`` at z 3.5."""
    miss = normal_tail(z) * 100
    decimals = max(0, 1 - math.floor(math.log10(miss)))
    return f"{100 - miss:.{decimals}f}%"


def wilson_bound(share: str, count: str, z: float, side: Side) -> str:
    """PromQL of Wilson's one-sided ``side`` bound of the recorded ``share`` of ``count``
    events; ``share`` and ``count`` are recorded series with the same labels."""
    sign = "-" if side == "lower" else "+"
    return (
        f"(\n  {share} + {z * z / 2:.6g} / {count}\n"
        f"  {sign} {z:g} * sqrt({share} * (1 - {share}) / {count} "
        f"+ {z * z / 4:.6g} / {count} ^ 2)\n)\n/\n(1 + {z * z:.6g} / {count})"
    )


def wilson(share: float, count: float, z: float, side: Side) -> float:
    """The same bound in Python (the demo's in-process evaluation and the tests)."""
    sign = -1.0 if side == "lower" else 1.0
    spread = math.sqrt(share * (1 - share) / count + z * z / (4 * count * count))
    bound = (share + z * z / (2 * count) + sign * z * spread) / (1 + z * z / count)
    return min(1.0, max(0.0, bound))  # float error at a share of 0 or 1 reads as -1e-17


@dataclass(frozen=True)
class BoundedShare:
    """A share of counted events with the evidence behind it, per window: the point
    share, the count it rests on and a one-sided Wilson bound, all recording rules.

    ``hits`` and ``events`` are counter selectors (production traffic already);
    with ``complement`` the share is ``1 - hits / events`` (the pass share from a
    counter of failures). The names are functions of the window."""

    hits: str
    events: str
    share: Callable[[str], str]
    count: Callable[[str], str]
    bound: Callable[[str], str]
    side: Side
    complement: bool = False
    by: str = "job"  # the labels each share is kept apart by
    # A series the count and the share are kept to (``and on (by)``): e.g. the judges that
    # run now, so that a replaced one's series stop at once instead of over the window.
    only: str = ""
    only_on: str = ""  # the labels ``only`` is matched on, when not all of ``by``

    def recording(self, window: str, z: float) -> list[dict[str, Any]]:
        """The three recording rules of ``window``, the bound at ``z``."""
        point = ratio(sum_rate(self.hits, window, self.by), sum_rate(self.events, window, self.by))
        share = self.share(window)
        count = self.count(window)
        on = self.only_on or self.by
        if self.complement:
            point = f"1 - (\n{point}\n)"
        return [
            {
                "record": count,
                "expr": kept_to(sum_increase(self.events, window, self.by), on, self.only),
            },
            {"record": share, "expr": kept_to(point, on, self.only)},
            {"record": self.bound(window), "expr": wilson_bound(share, count, z, self.side)},
        ]


def kept_to(expr: str, by: str, only: str) -> str:
    """``expr`` kept to the series of ``only`` (matched on ``by``), when it names one."""
    if not only:
        return expr
    return f"(\n{expr}\n)\nand on ({by})\n{only}"


def derivation_header(guardrails: GuardrailsConfig) -> list[str]:
    """The lines every derivation rests on, for the rule file's header comment."""
    budget = guardrails.false_alerts_per_week
    return [
        f"false_alerts_per_week: page {budget.page:g}, ticket {budget.ticket:g} per alert; "
        f"evaluation_interval {guardrails.evaluation_interval}; evidence alerts hold for "
        f"{hold_for(guardrails)}",
        "z: expected crossings a week = week / interval * min(pdf(z) * sqrt(interval / "
        "(pi * window)), P(Z > z)), solved for the alert's share of its budget (shared "
        "equally among its windows)",
    ]


def derivation(alert: str, windows: list[tuple[str, float]], how: str) -> list[str]:
    """One comment line per window of ``alert``: its z and confidence."""
    return [f"{alert} {window}: {how} at z {z:g} ({confidence(z)})" for window, z in windows]
