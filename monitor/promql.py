"""PromQL building blocks for the rules and dashboard panels that components contribute.

Rule expressions sum by ``job`` over a rate window from ``guardrails``, so replicas
add up. Every ratio drops windows without a denominator (``> 0``): no series
instead of NaN or +Inf. Panel expressions use the dashboard's Grafana variables
(``$job``, ``$__rate_interval``). Alerts carry ``severity`` (``page``: a person acts
now; ``ticket``: work for the next business day) and the annotations ``summary``,
``description`` and ``runbook``, an anchor into the runbook (the README heading
``### RagFaithfulnessLow`` is the anchor ``#ragfaithfulnesslow``).
"""

from __future__ import annotations

from typing import Any, Literal

from monitor.config import GuardrailsConfig

Severity = Literal["page", "ticket"]

# The pipeline's request counter (monitor.pipeline), the denominator of per-request ratios.
REQUESTS_TOTAL = "rag_requests_total"

# --- rule expressions -------------------------------------------------------------------


def sum_rate(selector: str, window: str, by: str = "job") -> str:
    return f"sum by ({by}) (rate({selector}[{window}]))"


def sum_increase(selector: str, window: str, by: str = "job") -> str:
    return f"sum by ({by}) (increase({selector}[{window}]))"


def ratio(numerator: str, denominator: str) -> str:
    """``numerator / denominator`` over the windows where the denominator is above 0."""
    return f"{numerator}\n/\n({denominator} > 0)"


def percent(share: float) -> str:
    return f"{share * 100:g}%"


def enough(guardrails: GuardrailsConfig, selector: str, window: str, by: str = "job") -> str:
    """The ``and`` clause that keeps a thin window silent: ``min_events`` of ``selector``."""
    return f"and on ({by})\n{sum_increase(selector, window, by)} >= {guardrails.min_events}"


def alert(
    guardrails: GuardrailsConfig,
    name: str,
    expr: str,
    *,
    severity: Severity,
    summary: str,
    description: str,
    for_: str | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An alerting rule with its severity, runbook link and the guardrails' ``for``."""
    return {
        "alert": name,
        "expr": expr,
        "for": guardrails.for_ if for_ is None else for_,
        "labels": {"severity": severity, **(labels or {})},
        "annotations": {
            "summary": summary,
            "description": description,
            "runbook": f"{guardrails.runbook_base}#{name.lower()}",
        },
    }


# --- panel expressions ------------------------------------------------------------------

JOB = 'job=~"$job"'
RATE = "$__rate_interval"


def panel_rate(metric: str, selector: str = "", by: str = "") -> str:
    labels = f"{JOB}, {selector}" if selector else JOB
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}{{{labels}}}[{RATE}]))"


def panel_quantile(q: float, histogram: str, by: str = "", selector: str = "") -> str:
    buckets = panel_rate(f"{histogram}_bucket", selector, by=f"le, {by}" if by else "le")
    return f"histogram_quantile({q}, {buckets})"


def panel_ratio(numerator: str, denominator: str) -> str:
    """A ratio that is empty, not NaN or a false 0, when the denominator is 0."""
    return f"{numerator} / ({denominator} > 0)"


def panel_gauge(aggregation: str, metric: str, by: str) -> str:
    return f"{aggregation} by ({by}) ({metric}{{{JOB}}})"


def panel_increase(metric: str, by: str) -> str:
    return f"sum by ({by}) (increase({metric}{{{JOB}}}[{RATE}]))"
