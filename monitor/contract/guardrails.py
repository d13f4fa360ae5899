"""The ``guardrails:`` section: thresholds, SLOs, windows and the false-alert budget the
generated rules derive their bounds from (``monitor.contract.rulekit.evidence``)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from monitor.contract.buckets import LATENCY_BUCKETS
from monitor.contract.durations import Duration, parse_duration
from monitor.contract.section import Section

# The Alerts page of the docs site as `mkdocs serve -f docs/mkdocs.yml` serves it.
DEFAULT_RUNBOOK_BASE = "http://127.0.0.1:8000/alerts/"


class AlertBudget(Section):
    page: float = Field(
        0.25, gt=0, description="false firings a week each page alert may cost a healthy service"
    )
    ticket: float = Field(
        1.0, gt=0, description="false firings a week each ticket alert may cost a healthy service"
    )


class LatencySLO(Section):
    objective: float = Field(0.95, gt=0, lt=1, description="share of requests under threshold_s")
    threshold_s: float = Field(
        1.5, gt=0, description="latency bound in seconds: a bucket bound of the stage histogram"
    )
    period: Duration = Field("30d", description="the SLO's period (the error budget's horizon)")
    page_burn_rate: float = Field(
        2.0,
        gt=1,
        description="page when the lower bound of the error ratio exceeds this many times the "
        "budget (2: the period's budget gone in half the period); the ticket fires at 1",
    )

    @field_validator("threshold_s")
    @classmethod
    def _bucket_bound(cls, threshold: float) -> float:
        if threshold not in LATENCY_BUCKETS:
            bounds = ", ".join(f"{bound:g}" for bound in LATENCY_BUCKETS)
            raise ValueError(
                f"{threshold:g} is not a bucket bound of rag_stage_latency_seconds; "
                f"pick one of {bounds}"
            )
        return threshold


def _two_windows(windows: list[str]) -> list[str]:
    """A [long, short] pair of an SLO tier: the short one resets the alert soon after."""
    if parse_duration(windows[0]) <= parse_duration(windows[1]):
        raise ValueError("the first window (long) must be longer than the second (short)")
    return windows


WindowPair = Annotated[list[Duration], Field(min_length=2, max_length=2)]


class SLOWindows(Section):
    page: WindowPair = Field(
        default_factory=lambda: ["1h", "5m"], description="[long, short] windows of the page"
    )
    ticket: WindowPair = Field(
        default_factory=lambda: ["6h", "30m"], description="[long, short] windows of the ticket"
    )

    _pairs = field_validator("page", "ticket")(_two_windows)


class ReviewCorrection(Section):
    window: Duration = Field(
        "28d",
        description="how far back random-stratum reviews count toward the corrected pass "
        "shares and the judge's bias (reviews arrive slowly; Prometheus must keep this much "
        "history)",
    )
    min_random_reviews: int = Field(
        100,
        ge=10,
        description="random-stratum reviews in window before a pass-share page uses the "
        "corrected bound instead of the judge's own",
    )
    bias_tolerance: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="how far the judge's pass share may stand from the reviewers' on the same "
        "random items before RagJudgeBiased tickets (once its bound excludes it)",
    )


class GuardrailsConfig(Section):
    faithfulness_min: float = Field(
        0.85, ge=0, le=1, description="share of sampled answers at or above threshold"
    )
    latency_slo: dict[str, LatencySLO] = Field(
        default_factory=lambda: {"total": LatencySLO()},
        description="latency SLO per stage: objective share under threshold_s over period",
    )
    false_exclusion_max: float = Field(0.02, ge=0, le=1, description="false-exclusion ratio")
    cost_per_query_max_usd: float = Field(0.02, gt=0, description="budget per query")
    false_alerts_per_week: AlertBudget = Field(
        default_factory=AlertBudget,
        description="the knob of every evidence alert: false firings a week per severity; "
        "the rules derive their bounds (z) from it and evaluation_interval",
    )
    evaluation_interval: Duration = Field(
        "1m", description="Prometheus's rule evaluation_interval (must match it)"
    )
    for_: Duration = Field(
        "10m",
        alias="for",
        description="how long a point-value breach lasts (cost); evidence alerts hold for "
        "two evaluation intervals",
    )
    window: Duration = Field(
        "5m", description="rate window of the point-value rules and the p95 recordings"
    )
    sample_windows: list[Duration] = Field(
        default_factory=lambda: ["30m", "6h"],
        min_length=1,
        max_length=4,
        description="windows of the sampled ratios' bounds (faithfulness, false exclusion): "
        "a short one for a large drop, a long one for a small one",
    )
    band_windows: list[Duration] = Field(
        default_factory=lambda: ["1h", "6h"],
        min_length=1,
        max_length=4,
        description="windows of the control bands (regeneration rate)",
    )
    slo_windows: SLOWindows = Field(
        default_factory=SLOWindows, description="burn-rate windows of the latency SLO alerts"
    )
    baseline: Duration = Field(
        "7d",
        description="history of a control band: its recent mean (while the same hour of past "
        "weeks is missing) and its overdispersion",
    )
    baseline_weeks: int = Field(
        4, ge=1, le=8, description="past weeks whose same hour sets a control band's centre"
    )
    release_window: Duration = Field(
        "6h",
        description="an alert within this long after a new service.version was first seen "
        "has suspected_cause regression, else drift",
    )
    min_events: int = Field(
        20, ge=1, description="denominator events a window needs before a ratio alert may fire"
    )
    field_missing_max: float = Field(
        0.05,
        gt=0,
        lt=1,
        description="share of production requests that may lack a field an enabled detector "
        "reads; past it (on the lower bound over coverage_window) RagTraceFieldMissing tickets",
    )
    coverage_window: Duration = Field(
        "1h", description="window of the field-coverage ticket (RagTraceFieldMissing)"
    )
    review_correction: ReviewCorrection = Field(
        default_factory=ReviewCorrection,
        description="judge pass shares corrected by the review's random stratum "
        "(prediction-powered), and the judge-bias ticket",
    )
    job: str = Field("rag-monitor", description="Prometheus job scraping the sidecar")
    runbook_base: str = Field(
        DEFAULT_RUNBOOK_BASE,
        description="URL of the docs site's Alerts page: an alert's runbook link is this + "
        "#<its name in lower case>; the default is the site served by mkdocs serve -f "
        "docs/mkdocs.yml, set it to the page on your own docs host",
    )
