"""The Grafana dashboard, built in code from the guardrail configuration.

One row per guardrail and one for the sidecar's own health. Guardrail
thresholds are drawn as constant series so that a panel shows the line it is
judged against. Fleet-wide quantiles come from the histograms (summed over
replicas); the per-replica window gauges are shown beside them. The
regeneration band uses the recording rules of ``rag-monitor rules``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from alerts.rules import RuleNames
from monitor.config import Config

UID = "rag-monitor"
SCHEMA_VERSION = 39
JOB = 'job=~"$job"'
RATE = "$__rate_interval"
_WIDTH = 24


@dataclass
class Panel:
    title: str
    queries: list[tuple[str, str]]  # (PromQL, legend)
    unit: str = "short"
    kind: str = "timeseries"
    description: str = ""
    width: int = 8
    thresholds: list[float] = field(default_factory=list)


@dataclass
class Row:
    title: str
    panels: list[Panel]


def _rate(metric: str, selector: str = "", by: str = "") -> str:
    labels = f"{JOB}, {selector}" if selector else JOB
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}{{{labels}}}[{RATE}]))"


def _quantile(q: float, metric: str, by: str = "", selector: str = "") -> str:
    buckets = _rate(f"{metric}_bucket", selector, by=f"le, {by}" if by else "le")
    return f"histogram_quantile({q}, {buckets})"


def _ratio(numerator: str, denominator: str) -> str:
    """A ratio that is empty, not NaN or a false 0, when the denominator is 0."""
    return f"{numerator} / ({denominator} > 0)"


def _gauge(aggregation: str, metric: str, by: str) -> str:
    return f"{aggregation} by ({by}) ({metric}{{{JOB}}})"


def _increase(metric: str, by: str) -> str:
    return f"sum by ({by}) (increase({metric}{{{JOB}}}[{RATE}]))"


def dashboard_rows(config: Config) -> list[Row]:
    """The panels of the dashboard, row by row."""
    guardrails = config.guardrails
    names = RuleNames(guardrails)
    slo_lines = [
        (f"vector({seconds})", f"SLO {stage}")
        for stage, seconds in sorted(guardrails.latency_p95_slo_s.items())
    ]
    scored = _rate("rag_faithfulness_evaluations_total", 'outcome="scored"')
    eligible = _rate("rag_filter_eligible_queries_total")
    band_mean = f"sum({names.regeneration_mean}{{{JOB}}})"
    sigma = guardrails.regeneration_band_sigma
    band_half_width = f"{sigma} * sum({names.regeneration_stddev}{{{JOB}}})"
    return [
        Row(
            "Faithfulness (HHEM, sampled)",
            [
                Panel(
                    "Pass share",
                    [
                        (
                            "1 - "
                            + _ratio(_rate("rag_faithfulness_below_threshold_total"), scored),
                            "pass share",
                        ),
                        (f"vector({guardrails.faithfulness_min})", "guardrail"),
                    ],
                    unit="percentunit",
                    description="Share of scored answers at or above the HHEM threshold.",
                ),
                Panel(
                    "Score distribution",
                    [
                        (
                            _increase("rag_faithfulness_score_bucket", by="le"),
                            "{{le}}",
                        ),
                    ],
                    kind="heatmap",
                ),
                Panel(
                    "Evaluations by outcome",
                    [
                        (_rate("rag_faithfulness_evaluations_total", by="outcome"), "{{outcome}}"),
                    ],
                    unit="ops",
                ),
            ],
        ),
        Row(
            "Latency",
            [
                Panel(
                    "p95 by stage (fleet, histograms)",
                    [
                        (_quantile(0.95, "rag_stage_latency_seconds", "stage"), "{{stage}}"),
                        *slo_lines,
                    ],
                    unit="s",
                    width=12,
                ),
                Panel(
                    "p50 / p99 by stage",
                    [
                        (_quantile(0.5, "rag_stage_latency_seconds", "stage"), "p50 {{stage}}"),
                        (_quantile(0.99, "rag_stage_latency_seconds", "stage"), "p99 {{stage}}"),
                    ],
                    unit="s",
                    width=12,
                ),
                Panel(
                    "Time to first token",
                    [
                        (
                            _quantile(0.95, "rag_stage_latency_seconds", selector='stage="ttft"'),
                            "p95 ttft",
                        ),
                    ],
                    unit="s",
                    width=12,
                ),
                Panel(
                    "Window quantiles per replica (DDSketch)",
                    [
                        (
                            _gauge(
                                "max",
                                "rag_stage_latency_window_seconds",
                                "instance, stage, quantile",
                            ),
                            "{{instance}} {{stage}} q{{quantile}}",
                        ),
                    ],
                    unit="s",
                    width=12,
                ),
            ],
        ),
        Row(
            "Retrieval: relevance filter and entitlement",
            [
                Panel(
                    "False-exclusion ratio",
                    [
                        (
                            _ratio(_rate("rag_filter_false_exclusions_total"), eligible),
                            "false exclusions / eligible queries",
                        ),
                        (f"vector({guardrails.false_exclusion_max})", "guardrail"),
                    ],
                    unit="percentunit",
                ),
                Panel(
                    "Mean recall@k",
                    [
                        (
                            _ratio(
                                _rate("rag_retrieval_recall_sum", by="k"),
                                _rate("rag_retrieval_recall_count", by="k"),
                            ),
                            "recall@{{k}}",
                        ),
                    ],
                    unit="percentunit",
                ),
                Panel(
                    "Entitlement violations",
                    [
                        (
                            _increase("rag_entitlement_violations_total", by="job"),
                            "violations",
                        ),
                    ],
                    description="A document of another tenant reached a caller: a security alarm.",
                ),
            ],
        ),
        Row(
            "Regeneration (re-ask) rate",
            [
                Panel(
                    "Regeneration ratio and control band",
                    [
                        (f"sum({names.regeneration_ratio}{{{JOB}}})", "ratio"),
                        (
                            f"{band_mean} + {band_half_width}",
                            "upper band",
                        ),
                        (
                            f"clamp_min({band_mean} - {band_half_width}, 0)",
                            "lower band",
                        ),
                    ],
                    unit="percentunit",
                    width=12,
                ),
                Panel(
                    "Feedback events by kind",
                    [
                        (_rate("rag_feedback_events_total", by="kind"), "{{kind}}"),
                    ],
                    unit="ops",
                    width=12,
                ),
            ],
        ),
        Row(
            "Cost",
            [
                Panel(
                    "Cost per query",
                    [
                        (
                            _ratio(
                                _rate("rag_request_cost_usd_sum"),
                                _rate("rag_request_cost_usd_count"),
                            ),
                            "USD per query",
                        ),
                        (f"vector({guardrails.cost_per_query_max_usd})", "budget"),
                    ],
                    unit="currencyUSD",
                ),
                Panel(
                    "Spend by model (USD/h)",
                    [
                        (f"3600 * {_rate('rag_cost_usd_total', by='model')}", "{{model}}"),
                    ],
                    unit="currencyUSD",
                ),
                Panel(
                    "Cost coverage (partial: cost per query is a lower bound)",
                    [
                        (_rate("rag_cost_requests_total", by="pricing"), "{{pricing}}"),
                        (
                            _rate("rag_cost_unpriced_requests_total", by="reason"),
                            "unpriced: {{reason}}",
                        ),
                    ],
                    unit="ops",
                ),
            ],
        ),
        Row(
            "Query drift (MMD)",
            [
                Panel(
                    "p-value",
                    [
                        (f"min by (signal) (rag_drift_p_value{{{JOB}}})", "{{signal}}"),
                        (f"vector({config.detectors.drift.p_value})", "significance"),
                    ],
                ),
                Panel(
                    "MMD statistic",
                    [
                        (f"max by (signal) (rag_drift_mmd_statistic{{{JOB}}})", "{{signal}}"),
                    ],
                ),
                Panel(
                    "Drift detected",
                    [
                        (f"max by (signal) (rag_drift_detected{{{JOB}}})", "{{signal}}"),
                    ],
                    kind="stat",
                ),
            ],
        ),
        Row(
            "Sidecar health",
            [
                Panel(
                    "Records by outcome",
                    [
                        (
                            _rate("rag_monitor_records_total", by="collector, outcome"),
                            "{{collector}} {{outcome}}",
                        ),
                    ],
                    unit="ops",
                    width=6,
                ),
                Panel(
                    "Queue depth",
                    [
                        (
                            f"max by (instance, queue) (rag_monitor_queue_depth{{{JOB}}})",
                            "{{instance}} {{queue}}",
                        ),
                    ],
                    width=6,
                ),
                Panel(
                    "Samples shed",
                    [
                        (
                            _rate("rag_monitor_samples_total", by="detector, outcome"),
                            "{{detector}} {{outcome}}",
                        ),
                    ],
                    unit="ops",
                    width=6,
                ),
                Panel(
                    "Dead-letter rate and Kafka lag",
                    [
                        (
                            _rate("rag_monitor_records_total", 'outcome="dead_lettered"'),
                            "dead-lettered/s",
                        ),
                        (
                            f"sum by (topic) (rag_monitor_kafka_lag_records{{{JOB}}})",
                            "lag {{topic}}",
                        ),
                    ],
                    width=6,
                ),
            ],
        ),
    ]


def build_dashboard(config: Config) -> dict[str, Any]:
    """The Grafana dashboard JSON model."""
    datasource = {"type": "prometheus", "uid": "${datasource}"}
    panels: list[dict[str, Any]] = []
    y = 0
    for row in dashboard_rows(config):
        panels.append(
            {
                "type": "row",
                "title": row.title,
                "id": len(panels) + 1,
                "collapsed": False,
                "gridPos": {"h": 1, "w": _WIDTH, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        x = 0
        for panel in row.panels:
            if x + panel.width > _WIDTH:
                x, y = 0, y + 8
            panels.append(_panel(panel, len(panels) + 1, x, y, datasource))
            x += panel.width
        y += 8
    return {
        "uid": UID,
        "title": "RAG monitor: guardrails",
        "tags": ["rag", "rag-monitor"],
        "timezone": "utc",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                },
                {
                    "name": "job",
                    "label": "Job",
                    "type": "query",
                    "datasource": datasource,
                    "query": {"query": "label_values(rag_requests_total, job)", "refId": "job"},
                    "definition": "label_values(rag_requests_total, job)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "current": {"text": "All", "value": "$__all"},
                    "hide": 0,
                },
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def _panel(
    panel: Panel, panel_id: int, x: int, y: int, datasource: dict[str, str]
) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": panel.kind,
        "title": panel.title,
        "description": panel.description,
        "datasource": datasource,
        "gridPos": {"h": 8, "w": panel.width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": datasource,
                "expr": expr,
                "legendFormat": legend,
                "range": True,
            }
            for i, (expr, legend) in enumerate(panel.queries)
        ],
    }


def render_dashboard(config: Config) -> str:
    """``build_dashboard`` as indented JSON with a trailing newline."""
    return json.dumps(build_dashboard(config), indent=2) + "\n"


def panel_queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    """(panel title, PromQL) for every query of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
    ]
