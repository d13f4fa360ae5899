"""PromQL building blocks for the rules and dashboard panels that components contribute.

Rule expressions sum by ``job`` over a rate window from ``guardrails``, so replicas
add up. Every ratio drops windows without a denominator (``> 0``): no series
instead of NaN or +Inf. Panel expressions use the dashboard's Grafana variables
(``$job``, ``$__rate_interval``). Alerts carry ``severity`` (``page``: a person acts
now; ``ticket``: work for the next business day) and the annotations ``summary``,
``description`` and ``runbook``, a link to the alert's section of the docs site's Alerts
page (``guardrails.runbook_base`` + ``#ragfaithfulnesslow`` for the heading
``## RagFaithfulnessLow``). A guardrail alert
also carries ``suspected_cause`` (the method's first triage rule, see ``triage``).
"""

from __future__ import annotations

from typing import Any, Literal

from monitor.contract.durations import parse_duration
from monitor.contract.guardrails import GuardrailsConfig
from monitor.contract.names import RELEASE_FIRST_SEEN

Severity = Literal["page", "ticket"]

# The variant of the traffic users are served (monitor.contract.variants.PRODUCTION); guardrails
# judge only it, so shadow or canary traffic never fires a production alert.
PRODUCTION_VARIANT = "production"

# --- rule expressions -------------------------------------------------------------------


def production(selector: str) -> str:
    """``selector`` (``name`` or ``name{...}``) restricted to production traffic: every
    guardrail rule reads its series through this one function."""
    matcher = f'variant="{PRODUCTION_VARIANT}"'
    if selector.endswith("}"):
        return f"{selector[:-1]}, {matcher}}}"
    return f"{selector}{{{matcher}}}"


def recorded_value(record: str, by: tuple[str, ...], format_: str) -> str:
    """An alert-description template showing ``record``'s value for the alert's labels
    ``by``: the count or bound a firing rests on, read at the evaluation."""
    matchers = ", ".join(f"{label}=%q" for label in by)
    arguments = " ".join(f"$labels.{label}" for label in by)
    query = f'(printf "{record}{{{matchers}}}" {arguments})'
    return f"{{{{ range query {query} }}}}{{{{ .Value | {format_} }}}}{{{{ end }}}}"


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


def release_first_seen(guardrails: GuardrailsConfig) -> str:
    """First seen per service and version, the earliest of the replicas. Over the last
    ``release_window``: a replica restarted after a release reports the restart as its
    first sight, and the samples from before the restart keep the true time."""
    window = guardrails.release_window
    return f"min by (service, version) (min_over_time({RELEASE_FIRST_SEEN}[{window}]))"


def triage(guardrails: GuardrailsConfig) -> tuple[str, str]:
    """The ``suspected_cause`` annotation template and the release sentence of the
    description: ``regression`` when some service.version was first seen within
    ``release_window`` before the evaluation, else ``drift`` (no code or model change).

    Annotations are expanded at every rule evaluation, with Prometheus's ``query``
    template function; ``if`` on an empty result is false. Not a label: a label's
    value changing while the alert fires would make it a new alert (resolve, wait ``for``
    again, notify twice) when the release leaves the window."""
    first_seen = release_first_seen(guardrails)
    seconds = parse_duration(guardrails.release_window)
    cause = (
        f'{{{{ if query "{first_seen} > time() - {seconds:g}" }}}}regression'
        "{{ else }}drift{{ end }}"
    )
    release = (
        f' Latest release: {{{{ range query "topk(1, {first_seen})" }}}}'
        "{{ .Labels.service }} {{ .Labels.version }}, first seen "
        "{{ .Value | humanizeTimestamp }}{{ else }}none reported{{ end }}."
    )
    return cause, release


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
    suspected_cause: bool = True,
) -> dict[str, Any]:
    """An alerting rule with its severity, runbook link and the guardrails' ``for``; with
    ``suspected_cause`` (a guardrail alert) the triage annotation and release sentence."""
    annotations = {
        "summary": summary,
        "description": description,
        "runbook": f"{guardrails.runbook_base}#{name.lower()}",
    }
    if suspected_cause:
        cause, release = triage(guardrails)
        annotations["description"] += release
        annotations["suspected_cause"] = cause
    return {
        "alert": name,
        "expr": expr,
        "for": guardrails.for_ if for_ is None else for_,
        "labels": {"severity": severity, **(labels or {})},
        "annotations": annotations,
    }


# --- panel expressions ------------------------------------------------------------------

JOB = 'job=~"$job"'
# The dashboard's variant variable (default production): guardrail panels show one pipeline.
VARIANT = 'variant=~"$variant"'
RATE = "$__rate_interval"


def panel_rate(metric: str, selector: str = "", by: str = "", *, guardrail: bool = False) -> str:
    """A summed rate; a ``guardrail`` series is shown for the dashboard's ``$variant``."""
    labels = ", ".join(part for part in (JOB, guardrail and VARIANT, selector) if part)
    grouping = f" by ({by})" if by else ""
    return f"sum{grouping} (rate({metric}{{{labels}}}[{RATE}]))"


def panel_quantile(
    q: float, histogram: str, by: str = "", selector: str = "", *, guardrail: bool = False
) -> str:
    grouping = f"le, {by}" if by else "le"
    buckets = panel_rate(f"{histogram}_bucket", selector, grouping, guardrail=guardrail)
    return f"histogram_quantile({q}, {buckets})"


def panel_ratio(numerator: str, denominator: str) -> str:
    """A ratio that is empty, not NaN or a false 0, when the denominator is 0."""
    return f"{numerator} / ({denominator} > 0)"


def panel_gauge(aggregation: str, metric: str, by: str) -> str:
    return f"{aggregation} by ({by}) ({metric}{{{JOB}}})"


def panel_increase(metric: str, by: str, *, guardrail: bool = False) -> str:
    labels = f"{JOB}, {VARIANT}" if guardrail else JOB
    return f"sum by ({by}) (increase({metric}{{{labels}}}[{RATE}]))"


def panel_recorded(record: str) -> str:
    """A recording rule's series of the chosen jobs (the rules count production only)."""
    return f"{record}{{{JOB}}}"
