"""The latency detector's rules and panels: each stage in ``guardrails.latency_slo`` is an
SLO (``objective`` of its requests within ``threshold_s``, a bucket bound), alerted on
the burn of its error budget over two tiers of ``guardrails.slo_windows``: the page
(RagStageLatencySLOBreach) when the lower Wilson bound of the slow share over the long
window, and the share over the short one, exceed ``page_burn_rate`` times the budget;
the ticket (RagStageLatencySLOBudgetBurn) when they exceed the budget itself. The
bound's z comes from the severity's false-alert budget
(``monitor.contract.rulekit.evidence``). The p95 recording and panels stay for reading,
not for alerting."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.latency.config import LatencyConfig
from detectors.latency.names import (
    STAGE_LATENCY_SECONDS,
    STAGE_LATENCY_WINDOW_SECONDS,
    request_count,
    slow_lower_bound,
    slow_ratio,
    stage_p95,
)
from monitor.contract.guardrails import GuardrailsConfig, LatencySLO
from monitor.contract.rulekit.evidence import confidence, hold_for, wilson_bound, window_z
from monitor.contract.rulekit.fragments import Panel, Row, RuleFragment
from monitor.contract.rulekit.promql import (
    alert,
    panel_gauge,
    panel_quantile,
    panel_recorded,
    percent,
    production,
    ratio,
    recorded_value,
    sum_increase,
    sum_rate,
)

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]


BY = "job, stage"
TIERS = {"page": "RagStageLatencySLOBreach", "ticket": "RagStageLatencySLOBudgetBurn"}


def burn_rate(slo: LatencySLO, severity: str) -> float:
    """The tier's factor on the error budget: ``page_burn_rate`` for the page, 1 for the
    ticket (at any faster pace the period's budget runs out)."""
    return slo.page_burn_rate if severity == "page" else 1.0


def go_float(value: float) -> str:
    """``value`` as prometheus_client writes an ``le`` label: ``1.5``, ``1.0``, ``60.0``."""
    return repr(float(value))


def slow_share_rule(stage: str, slo: LatencySLO, window: str) -> dict[str, Any]:
    """The share of the stage's requests above its threshold (from the threshold's bucket)."""
    stage_matcher = f'stage="{stage}"'
    bound = go_float(slo.threshold_s)  # spelled as the client spells ``le``
    within = production(f'{STAGE_LATENCY_SECONDS}_bucket{{{stage_matcher}, le="{bound}"}}')
    count = production(f"{STAGE_LATENCY_SECONDS}_count{{{stage_matcher}}}")
    fast = ratio(sum_rate(within, window, BY), sum_rate(count, window, BY))
    return {"record": slow_ratio(window), "expr": f"1 - (\n{fast}\n)"}


def burn_alert(
    guardrails: GuardrailsConfig, severity: str, stage: str, slo: LatencySLO, z: float
) -> dict[str, Any]:
    """The tier's alert for one stage: the long window's lower bound and the short
    window's share both above ``burn`` times the error budget."""
    long, short = getattr(guardrails.slo_windows, severity)
    burn = burn_rate(slo, severity)
    budget = 1 - slo.objective
    limit = round(burn * budget, 10)
    selector = f'{{stage="{stage}"}}'
    slow = recorded_value(slow_ratio(long), ("job", "stage"), "humanizePercentage")
    count = recorded_value(request_count(long), ("job", "stage"), 'printf "%.0f"')
    slo_text = f"{percent(slo.objective)} of requests within {slo.threshold_s:g}s over {slo.period}"
    return alert(
        guardrails,
        TIERS[severity],
        f"{slow_lower_bound(long)}{selector} > {limit:g}\nand on ({BY})\n"
        f"{slow_ratio(short)}{selector} > {limit:g}",
        severity=severity,  # type: ignore[arg-type]
        summary=f"The {stage} stage burns its latency error budget at {burn:g}x or faster "
        f"(SLO {slo.threshold_s:g}s, {{{{ $labels.job }}}})",
        description=f"Over the last {long}, {slow} of {count} {stage} requests "
        f"({slow_ratio(long)}, {request_count(long)}) took longer than {slo.threshold_s:g}s; "
        f"even the {confidence(z)} lower bound, {{{{ $value | humanizePercentage }}}} "
        f"({slow_lower_bound(long)}), is above {burn:g} x the {percent(budget)} the SLO "
        f"({slo_text}) allows, and so is the last {short}.",
        for_=hold_for(guardrails),
        labels={"slo_seconds": f"{slo.threshold_s:g}", "objective": f"{slo.objective:g}"},
    )


def rules(config: LatencyConfig, guardrails: GuardrailsConfig) -> RuleFragment:
    """The p95 per job and stage; per SLO window the slow share and the request count; per
    tier's long window the lower bound; one page and one ticket alert per SLO stage."""
    window, slos = guardrails.window, sorted(guardrails.latency_slo.items())
    buckets = sum_rate(production(f"{STAGE_LATENCY_SECONDS}_bucket"), window, by=f"{BY}, le")
    recording = [{"record": stage_p95(window), "expr": f"histogram_quantile(0.95, {buckets})"}]
    tiers = {s: getattr(guardrails.slo_windows, s) for s in TIERS}
    windows = list(dict.fromkeys(w for pair in tiers.values() for w in pair))
    count = production(f"{STAGE_LATENCY_SECONDS}_count")
    for w in windows:
        recording.append({"record": request_count(w), "expr": sum_increase(count, w, BY)})
        recording += [slow_share_rule(stage, slo, w) for stage, slo in slos]
    alerting, derivations = [], []
    for severity, (long, short) in tiers.items():
        [(_, z)] = window_z(guardrails, severity, [long])
        bound = wilson_bound(slow_ratio(long), request_count(long), z, "lower")
        recording.append({"record": slow_lower_bound(long), "expr": bound})
        alerting += [burn_alert(guardrails, severity, stage, slo, z) for stage, slo in slos]
        derivations += [
            f"{TIERS[severity]} {stage}: lower bound of the slow share over {long} at z {z:g} "
            f"({confidence(z)}) and the share over {short} above "
            f"{burn_rate(slo, severity):g} x {1 - slo.objective:.4g}"
            for stage, slo in slos
        ]
    return RuleFragment(
        recording=recording,
        alerting=alerting,
        promtool_tests=PROMTOOL_TESTS,
        derivations=derivations,
    )


def rows(config: LatencyConfig, guardrails: GuardrailsConfig) -> list[Row]:
    """The SLOs' slow shares beside their lower bounds and budgets, the requests they rest
    on, fleet quantiles from the histograms against the thresholds, TTFT, per-replica
    windows."""
    slos = sorted(guardrails.latency_slo.items())
    slo_lines = [(f"vector({slo.threshold_s:g})", f"SLO {stage}") for stage, slo in slos]
    long_windows = [
        pair[0] for pair in (guardrails.slo_windows.page, guardrails.slo_windows.ticket)
    ]
    shares = [
        query
        for window in long_windows
        for query in (
            (panel_recorded(slow_ratio(window)), f"{{{{stage}}}} slow share {window}"),
            (panel_recorded(slow_lower_bound(window)), f"{{{{stage}}}} lower bound {window}"),
        )
    ]
    budgets = [(f"vector({1 - slo.objective:.6g})", f"budget {stage}") for stage, slo in slos]
    counts = [
        (panel_recorded(request_count(window)), f"{{{{stage}}}} requests in {window}")
        for window in long_windows
    ]
    slo_panels = [
        Panel(
            "SLO: slow share, its lower bound and the error budget",
            [*shares, *budgets],
            unit="percentunit",
            width=12,
            description="Share of requests over the SLO threshold; the page fires when the "
            "lower bound is above page_burn_rate x the budget, the ticket above the budget.",
        ),
        Panel("SLO: requests per window (the evidence)", counts, width=12),
    ]
    histogram = STAGE_LATENCY_SECONDS
    window = panel_gauge("max", STAGE_LATENCY_WINDOW_SECONDS, "instance, stage, quantile")
    panels = [
        Panel(
            "p95 by stage (fleet, histograms)",
            [(panel_quantile(0.95, histogram, "stage", guardrail=True), "{{stage}}"), *slo_lines],
            unit="s",
            width=12,
        ),
        Panel(
            "p50 / p99 by stage",
            [
                (panel_quantile(0.5, histogram, "stage", guardrail=True), "p50 {{stage}}"),
                (panel_quantile(0.99, histogram, "stage", guardrail=True), "p99 {{stage}}"),
            ],
            unit="s",
            width=12,
        ),
        Panel(
            "Time to first token",
            [
                (
                    panel_quantile(0.95, histogram, selector='stage="ttft"', guardrail=True),
                    "p95 ttft",
                )
            ],
            unit="s",
            width=12,
        ),
        Panel(
            "Window quantiles per replica (DDSketch)",
            [(window, "{{instance}} {{stage}} q{{quantile}}")],
            unit="s",
            width=12,
        ),
    ]
    return [Row("Latency", [*slo_panels, *panels])]
