"""The latency detector's rules and panels: per-stage p95 against the SLOs in
``guardrails.latency_p95_slo_s`` (one alert rule per stage)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from detectors.latency.names import STAGE_LATENCY_SECONDS, STAGE_LATENCY_WINDOW_SECONDS, stage_p95
from monitor.components import Panel, Row, RuleFragment
from monitor.config import GuardrailsConfig
from monitor.promql import alert, enough, panel_gauge, panel_quantile, sum_rate

PROMTOOL_TESTS = [Path(__file__).with_name("alerting_test.yaml")]


def rules(config: Any, guardrails: GuardrailsConfig) -> RuleFragment:
    """The p95 recording per job and stage, and one SLO alert per stage with an SLO."""
    window = guardrails.window
    recorded = stage_p95(window)
    buckets = sum_rate(f"{STAGE_LATENCY_SECONDS}_bucket", window, by="job, stage, le")
    alerts = []
    for stage, slo in sorted(guardrails.latency_p95_slo_s.items()):
        selector = f'{{stage="{stage}"}}'
        count = f"{STAGE_LATENCY_SECONDS}_count{selector}"
        alerts.append(
            alert(
                guardrails,
                "RagStageLatencySLOBreach",
                f"{recorded}{selector} > {slo}\n" + enough(guardrails, count, window, "job, stage"),
                severity="page",
                summary=f"p95 latency of the {stage} stage is above its {slo:g}s SLO "
                "({{ $labels.job }})",
                description=f"The p95 of the {stage} stage over the last {window} is "
                f"{{{{ $value | humanizeDuration }}}}; the SLO is {slo:g}s.",
                labels={"slo_seconds": f"{slo:g}"},
            )
        )
    return RuleFragment(
        recording=[{"record": recorded, "expr": f"histogram_quantile(0.95, {buckets})"}],
        alerting=alerts,
        promtool_tests=PROMTOOL_TESTS,
    )


def rows(config: Any, guardrails: GuardrailsConfig) -> list[Row]:
    """Fleet quantiles from the histograms against the SLOs, TTFT, per-replica windows."""
    slo_lines = [
        (f"vector({seconds})", f"SLO {stage}")
        for stage, seconds in sorted(guardrails.latency_p95_slo_s.items())
    ]
    histogram = STAGE_LATENCY_SECONDS
    window = panel_gauge("max", STAGE_LATENCY_WINDOW_SECONDS, "instance, stage, quantile")
    panels = [
        Panel(
            "p95 by stage (fleet, histograms)",
            [(panel_quantile(0.95, histogram, "stage"), "{{stage}}"), *slo_lines],
            unit="s",
            width=12,
        ),
        Panel(
            "p50 / p99 by stage",
            [
                (panel_quantile(0.5, histogram, "stage"), "p50 {{stage}}"),
                (panel_quantile(0.99, histogram, "stage"), "p99 {{stage}}"),
            ],
            unit="s",
            width=12,
        ),
        Panel(
            "Time to first token",
            [(panel_quantile(0.95, histogram, selector='stage="ttft"'), "p95 ttft")],
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
    return [Row("Latency", panels)]
