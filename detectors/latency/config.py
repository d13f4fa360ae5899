"""The detectors.latency section."""

from __future__ import annotations

from pydantic import Field, field_validator

from monitor.contract.section import Section


class LatencyConfig(Section):
    window_s: float = Field(300, gt=0, description="sliding window of the quantile gauges")
    quantiles: list[float] = Field(
        default_factory=lambda: [0.5, 0.95, 0.99], description="quantiles exported per stage"
    )

    @field_validator("quantiles")
    @classmethod
    def _in_unit_interval(cls, quantiles: list[float]) -> list[float]:
        if not all(0 < q < 1 for q in quantiles):
            raise ValueError("every quantile must be in (0, 1)")
        return quantiles
