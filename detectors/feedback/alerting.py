"""The feedback detector's rules and panels: the regeneration (re-ask) ratio in a control
band of its own history (``monitor.contract.rulekit.control_band``: the same hour of past weeks, the
binomial width at the window's request count, overdispersion from history, z from the
ticket budget), on each of ``guardrails.band_windows``."""

from __future__ import annotations

from pathlib import Path

from detectors.feedback.config import FeedbackConfig
from detectors.feedback.names import (
    FEEDBACK_DWELL_SECONDS,
    FEEDBACK_EVENTS_TOTAL,
    FEEDBACK_THUMBS_DOWN_TOTAL,
    REGENERATION,
)
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import REQUESTS_TOTAL
from monitor.contract.rulekit.control_band import ControlBand
from monitor.contract.rulekit.evidence import derivation, hold_for, window_z
from monitor.contract.rulekit.fragments import Panel, Row, RuleFragment
from monitor.contract.rulekit.promql import (
    alert,
    panel_quantile,
    panel_rate,
    panel_recorded,
    production,
)

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]
BAND = ControlBand(
    hits=production(f'{FEEDBACK_EVENTS_TOTAL}{{kind="regenerate"}}'),
    events=production(REQUESTS_TOTAL),
    prefix=REGENERATION,
)


def rules(config: FeedbackConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    """Per window the band's recordings and the ticket when the ratio leaves the band."""
    windows = window_z(guardrails, "ticket", guardrails.band_windows, sides=2)
    recording, alerting = [], []
    for window, z in windows:
        recording += BAND.recording(guardrails, window, z)
        ratio, expected = BAND.ratio(window), BAND.expected(window)
        alerting.append(
            alert(
                guardrails,
                "RagRegenerationRateAnomalous",
                f"abs({ratio} - {expected})\n> {BAND.half_width(window)}",
                severity="ticket",
                summary="Regeneration rate is outside its control band ({{ $labels.job }})",
                description=f"Over the last {window}, the share of requests regenerated "
                f'({ratio}) is {{{{ printf "%.2f" $value }}}} (as a share) away from what the same '
                f"hours of the past {guardrails.baseline_weeks} weeks (or, while they are "
                f"missing, the last {guardrails.baseline}) expect ({expected}): more than the "
                f"band's half width ({BAND.half_width(window)}), z {z:g} times the binomial "
                f"deviation at the window's requests ({BAND.count(window)}) and the expected "
                f"share's ({BAND.expected_count(window)}), times the overdispersion of its "
                f"history ({BAND.overdispersion(window)}).",
                for_=hold_for(guardrails),
                labels={"window": window},
            )
        )
    return RuleFragment(
        recording=recording,
        alerting=alerting,
        promtool_tests=PROMTOOL_TESTS,
        derivations=derivation(
            "RagRegenerationRateAnomalous", windows, "two-sided p-chart band (half each side)"
        ),
    )


def rows(config: FeedbackConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """The ratio in its band (from the recording rules), the requests the band rests on,
    feedback events by kind, thumbs-down reasons and dwell quantiles."""
    band = []
    for window in guardrails.band_windows:
        centre, half = BAND.expected(window), BAND.half_width(window)
        band += [
            (panel_recorded(BAND.ratio(window)), f"ratio {window}"),
            (panel_recorded(centre), f"expected {window}"),
            (f"{panel_recorded(centre)} + on (job) {half}", f"upper band {window}"),
            (f"clamp_min({panel_recorded(centre)} - on (job) {half}, 0)", f"lower band {window}"),
        ]
    counts = [
        (panel_recorded(BAND.count(window)), f"requests in {window}")
        for window in guardrails.band_windows
    ]
    panels = [
        Panel("Regeneration ratio and control band", band, unit="percentunit", width=12),
        Panel("Requests per window (the band's evidence)", counts, width=6),
        Panel(
            "Feedback events by kind",
            [(panel_rate(FEEDBACK_EVENTS_TOTAL, by="kind", guardrail=True), "{{kind}}")],
            unit="ops",
            width=6,
        ),
    ]
    # Implicit kinds are candidate signals (the method, Part 10): shown, not alerted on,
    # until `rag-monitor report review` shows how they go with reviewers' verdicts.
    signals = [
        Panel(
            "Thumbs-down by reason",
            [(panel_rate(FEEDBACK_THUMBS_DOWN_TOTAL, by="reason", guardrail=True), "{{reason}}")],
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
