"""A control band for any rate of events per request that has its own history: a p-chart.

The centre is what the same hour of the week showed over the last
``guardrails.baseline_weeks`` weeks (``offset 1w``, ``2w``, ...), so the band follows the
week's season; while no past week has data it falls back to the mean of the last
``guardrails.baseline``. The width is binomial: the variance of the difference between
the current window's share (``n`` requests) and the centre (``n0`` requests behind it),
``p0 (1 - p0) (1/n + 1/n0)``, times an overdispersion factor: the mean squared
standardised difference over the baseline, clamped at 1, so a rate that varies more than
a coin from week to week gets a wider band, never a narrower one. So night windows (few
requests) get a wide band and peak windows a narrow one, and ``z`` comes from the
false-alert budget (``monitor.contract.rulekit.evidence``). The overdispersion is learnt
only against the seasonal centre, and only once a seventh of the baseline has that history (1
before): measured against a flat mean, the week's season itself would pass for noise
and widen the band. Everything is recorded from counters in Prometheus, so replicas
add up and any history can be replayed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from monitor.contract.durations import parse_duration
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.rulekit.promql import sum_increase, sum_rate


@dataclass(frozen=True)
class ControlBand:
    """``hits`` per ``events`` (counter selectors, production already) against its band;
    its recording rules are named ``{prefix}:...{window}``."""

    hits: str
    events: str
    prefix: str

    def count(self, window: str) -> str:
        """The events in the window: the ``n`` of the current share."""
        return f"{self.prefix}:events_increase{window}"

    def ratio(self, window: str) -> str:
        return f"{self.prefix}:ratio_rate{window}"

    def expected(self, window: str) -> str:
        """The band's centre ``p0``."""
        return f"{self.prefix}:expected_rate{window}"

    def expected_count(self, window: str) -> str:
        """The events ``p0`` rests on, ``n0``."""
        return f"{self.prefix}:expected_events{window}"

    def seasonal_count(self, window: str) -> str:
        """The events of the same window in the past weeks (absent while none has data)."""
        return f"{self.prefix}:seasonal_events{window}"

    def zscore(self, window: str) -> str:
        """The binomially standardised difference between the share and ``p0``."""
        return f"{self.prefix}:zscore{window}"

    def overdispersion(self, window: str) -> str:
        return f"{self.prefix}:overdispersion{window}"

    def half_width(self, window: str) -> str:
        return f"{self.prefix}:band_half_width{window}"

    @staticmethod
    def _min_history(guardrails: GuardrailsConfig) -> int:
        """Evaluations of seasonal history the overdispersion needs: a seventh of the
        baseline (a day of a week)."""
        interval = parse_duration(guardrails.evaluation_interval)
        return max(1, round(parse_duration(guardrails.baseline) / 7 / interval))

    def recording(
        self, guardrails: GuardrailsConfig, window: str, z: float
    ) -> list[dict[str, Any]]:
        """The recording rules of ``window``, in the order they depend on each other."""
        n, p, p0, n0 = (
            self.count(window),
            self.ratio(window),
            self.expected(window),
            self.expected_count(window),
        )
        events_rate = sum_rate(self.events, window)
        # A job without any hit yet records 0, not nothing: quiet periods are history too.
        share = (
            f"(\n  {sum_rate(self.hits, window)}\n  or {events_rate} * 0\n)\n/\n({events_rate} > 0)"
            f"\nand on (job)\n{n} >= {guardrails.min_events}"
        )
        # The same window of each past week; a week without data adds 0 (n * 0 has the job).
        weeks = range(1, guardrails.baseline_weeks + 1)
        past_hits, past_events = (
            "(\n"
            + "\n  +\n".join(
                f"  (sum by (job) (increase({selector}[{window}] offset {k}w)) or {n} * 0)"
                for k in weeks
            )
            + "\n)"
            for selector in (self.hits, self.events)
        )
        recent_hits = f"({sum_increase(self.hits, guardrails.baseline)} or {n} * 0)"
        recent_events = sum_increase(self.events, guardrails.baseline)
        seasonal = self.seasonal_count(window)
        # At a share of 1 (every request regenerated) increase()'s extrapolation can put the
        # centre a hair above 1, and the square root of a negative variance would blank the
        # band and silence its alert: the variance takes the centre at most 1.
        centre = f"clamp_max({p0}, 1)"
        variance = f"{centre} * (1 - {centre}) * (1 / {n} + 1 / {n0})"
        history = f"{self.zscore(window)}[{guardrails.baseline}]"
        return [
            {"record": n, "expr": sum_increase(self.events, window)},
            {"record": p, "expr": share},
            {"record": seasonal, "expr": f"{past_events} > 0"},
            {
                "record": p0,
                "expr": f"{past_hits}\n/\n{seasonal}\nor\n{recent_hits}\n/\n({recent_events} > 0)",
            },
            {"record": n0, "expr": f"{seasonal}\nor\n{recent_events}"},
            # Only against a seasonal centre: a flat mean would mistake the season for noise.
            {
                "record": self.zscore(window),
                "expr": f"({p} - {p0})\n/\nsqrt(({variance}) > 0)\nand on (job)\n{seasonal}",
            },
            # 1 until a seventh of the baseline has seasonal history: an average of a few
            # correlated windows is noise, and the clamp would turn that noise into width.
            {
                "record": self.overdispersion(window),
                "expr": f"clamp_min(\n  stddev_over_time({history}) ^ 2"
                f" + avg_over_time({history}) ^ 2,\n  1\n)\nand on (job)\n"
                f"count_over_time({history}) >= {self._min_history(guardrails)}"
                f"\nor\n{n} * 0 + 1",
            },
            {
                "record": self.half_width(window),
                "expr": f"{z:g} * sqrt({self.overdispersion(window)} * {variance})",
            },
        ]
