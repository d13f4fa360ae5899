"""The feedback detector's rules and panels: the regeneration (re-ask) ratio in a
control band of its own history (``guardrails.baseline``, ``regeneration_band_sigma``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.feedback.names import (
    FEEDBACK_DWELL_SECONDS,
    FEEDBACK_EVENTS_TOTAL,
    FEEDBACK_THUMBS_DOWN_TOTAL,
    regeneration_mean,
    regeneration_ratio,
    regeneration_stddev,
)
from monitor.components import Panel, Row, RuleFragment
from monitor.config import GuardrailsConfig
from monitor.promql import (
    JOB,
    REQUESTS_TOTAL,
    alert,
    panel_quantile,
    panel_rate,
    sum_increase,
    sum_rate,
)

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]


def rules(config: Any, guardrails: GuardrailsConfig) -> RuleFragment:
    """The ratio with its baseline mean and deviation, and the alert outside the band."""
    window, baseline, sigma = (
        guardrails.window,
        guardrails.baseline,
        guardrails.regeneration_band_sigma,
    )
    current = regeneration_ratio(window)
    mean, stddev = regeneration_mean(window, baseline), regeneration_stddev(window, baseline)
    regenerations = sum_rate(f'{FEEDBACK_EVENTS_TOTAL}{{kind="regenerate"}}', window)
    requests = sum_rate(REQUESTS_TOTAL, window)
    recording = [
        {
            # Recorded only for windows with enough requests: thin windows would
            # widen the baseline band with noise. A job without any regenerate
            # event yet records 0, not nothing, so the baseline sees quiet periods.
            "record": current,
            "expr": f"(\n  {regenerations}\n  or {requests} * 0\n)\n/\n({requests} > 0)\n"
            f"and on (job)\n{sum_increase(REQUESTS_TOTAL, window)} >= {guardrails.min_events}",
        },
        {"record": mean, "expr": f"avg_over_time({current}[{baseline}])"},
        {"record": stddev, "expr": f"stddev_over_time({current}[{baseline}])"},
    ]
    band = f"{sigma:g} * {stddev}"
    # A zero stddev (no history yet, or a constant series) is no band.
    anomalous = alert(
        guardrails,
        "RagRegenerationRateAnomalous",
        f"(\n  {current}\n  > on (job) {mean} + {band}\n"
        f"or\n  {current}\n  < on (job) {mean} - {band}\n"
        f")\nand on (job)\n{stddev} > 0",
        severity="ticket",
        summary="Regeneration rate is outside its control band ({{ $labels.job }})",
        description=f"{{{{ $value | humanizePercentage }}}} of the requests in the last "
        f"{window} were regenerated, outside the band of the mean +/- {sigma:g} "
        f"standard deviations of the last {baseline}.",
    )
    return RuleFragment(recording=recording, alerting=[anomalous], promtool_tests=PROMTOOL_TESTS)


def rows(config: Any, guardrails: GuardrailsConfig) -> list[Row]:
    """The ratio in its band (from the recording rules), feedback events by kind,
    thumbs-down reasons and dwell quantiles."""
    window, baseline = guardrails.window, guardrails.baseline
    band_mean = f"sum({regeneration_mean(window, baseline)}{{{JOB}}})"
    sigma = guardrails.regeneration_band_sigma
    band_half_width = f"{sigma} * sum({regeneration_stddev(window, baseline)}{{{JOB}}})"
    panels = [
        Panel(
            "Regeneration ratio and control band",
            [
                (f"sum({regeneration_ratio(window)}{{{JOB}}})", "ratio"),
                (f"{band_mean} + {band_half_width}", "upper band"),
                (f"clamp_min({band_mean} - {band_half_width}, 0)", "lower band"),
            ],
            unit="percentunit",
            width=12,
        ),
        Panel(
            "Feedback events by kind",
            [(panel_rate(FEEDBACK_EVENTS_TOTAL, by="kind"), "{{kind}}")],
            unit="ops",
            width=12,
        ),
    ]
    # Implicit kinds are candidate signals (the method, Part 10): shown, not alerted on,
    # until `rag-monitor report review` shows how they go with reviewers' verdicts.
    signals = [
        Panel(
            "Thumbs-down by reason",
            [(panel_rate(FEEDBACK_THUMBS_DOWN_TOTAL, by="reason"), "{{reason}}")],
            unit="ops",
            width=12,
        ),
        Panel(
            "Dwell time on answers",
            [(panel_quantile(q, FEEDBACK_DWELL_SECONDS), f"p{q * 100:g}") for q in (0.5, 0.9)],
            unit="s",
            width=12,
        ),
    ]
    return [Row("Regeneration (re-ask) rate", panels), Row("Feedback signals", signals)]
