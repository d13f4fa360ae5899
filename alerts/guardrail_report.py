"""``rag-monitor report guardrails``: the Monday review on one page, read from Prometheus.

For the period (``--since``, up to ``--until``): each guardrail over time against its
threshold (``alerts.guardrail_series``, the recordings the alerts read), with the spans
its alerts fired shaded (Prometheus's ``ALERTS{alertstate="firing"}``) and releases,
judge changes and embedding-model changes as vertical lines; the slices worst first with
their bounds; the coverage matrix (intent x document type); the review's progress, the
judge's bias and how many reviews the correction is worth; the fields production traces
lack; and the commands that write the drift, review and shadow reports.

HTML is one self-contained page (figures as data-URI PNGs, no script, no outside
resource); Markdown writes its figures beside it. Every label value comes from
production (a slice, a version, a judge's name) and is escaped: production text is
hostile.

This module reads the report (``build_report``) and writes it; ``alerts.guardrail_sections``
renders its pages and ``alerts.guardrail_figures`` draws its figures.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from alerts.guardrail_data import (
    MIN_STEP_S,
    POINTS,
    Firing,
    GuardrailPlot,
    GuardrailReport,
    Marker,
    Points,
    Query,
    RangeQuery,
    ReviewLine,
    SliceTable,
)
from alerts.guardrail_sections import render_html, render_markdown
from alerts.guardrail_series import (
    Guardrail,
    SliceRecording,
    guardrails,
    recorded_names,
    slice_recordings,
)
from alerts.rules import build_rules
from monitor.contract.config import Config
from monitor.contract.durations import parse_duration
from monitor.contract.names import (
    COVERAGE_REQUESTS_TOTAL,
    FIELDS_TOTAL,
    JUDGE_INFO,
    MISSING_INPUTS_TOTAL,
    MMD_STATISTIC,
    QUEUE_ITEMS,
    RELEASE_FIRST_SEEN,
    REPRESENTATION_INFO,
    SAMPLED_TOTAL,
    VERDICTS_TOTAL,
)
from monitor.contract.prometheus_query import query_prometheus, query_prometheus_range
from monitor.contract.rulekit.prediction_powered import (
    Estimate,
    ReviewedPairs,
    effective_reviews,
    judge_bias,
)

# --- reading ---------------------------------------------------------------------------------


def _labels_text(labels: dict[str, str], leave: Sequence[str] = ("__name__", "job")) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items()) if k not in leave)


def _runs(points: Points, step: float) -> list[tuple[float, float]]:
    """Consecutive points (no gap over one and a half steps) as (first, last) times."""
    runs: list[tuple[float, float]] = []
    for t, _ in points:
        if runs and t - runs[-1][1] <= 1.5 * step:
            runs[-1] = (runs[-1][0], t)
        else:
            runs.append((t, t))
    return runs


def _firings(ranged: RangeQuery, step: float) -> list[Firing]:
    found = []
    for labels, points in ranged('ALERTS{alertstate="firing"}'):
        name = labels.get("alertname", "")
        text = _labels_text(labels, ("__name__", "alertname", "alertstate"))
        found += [Firing(name, text, a, b + step) for a, b in _runs(points, step)]
    return sorted(found, key=lambda f: (f.start, f.alert))


def _first_seen(
    ranged: RangeQuery, expr: str, label: str, kind: str, *, since: float, step: float
) -> list[Marker]:
    """A marker where a value of ``label`` first appears after the period's start."""
    markers = []
    for labels, points in ranged(expr):
        if points and points[0][0] > since + step:
            value = labels.get(label, "")
            markers.append(Marker(points[0][0], kind, f"{kind} {value}"))
    return markers


def _markers(
    instant: Query, ranged: RangeQuery, sel: str, period: str, *, since: float, step: float
) -> list[Marker]:
    releases = instant(
        f"min by (service, version) (min_over_time({RELEASE_FIRST_SEEN}{{{sel}}}[{period}]))"
    )
    markers = [
        Marker(value, "release", f"release {labels.get('service', '')} {labels.get('version', '')}")
        for labels, value in releases
        if value > since
    ]
    markers += _first_seen(
        ranged, f"max by (judge) ({JUDGE_INFO}{{{sel}}})", "judge", "judge", since=since, step=step
    )
    markers += _first_seen(
        ranged,
        f"max by (representation) ({REPRESENTATION_INFO}{{{sel}}})",
        "representation",
        "embedding model",
        since=since,
        step=step,
    )
    return sorted(markers, key=lambda m: m.at)


def _legend(template: str, labels: dict[str, str]) -> str:
    text = template
    for key, value in labels.items():
        text = text.replace(f"{{{{{key}}}}}", value)
    return text


def _merged(template: str, found: list[tuple[dict[str, str], Points]]) -> list[tuple[str, Points]]:
    """One series per legend: ``a or b`` returns ``a``'s series and, where ``a`` has no
    sample, ``b``'s under its own metric name; they are one line on the plot."""
    lines: dict[str, Points] = {}
    for labels, points in found:
        lines.setdefault(_legend(template, labels), []).extend(points)
    return [(legend, sorted(points)) for legend, points in lines.items()]


def _plot(guardrail: Guardrail, ranged: RangeQuery, sel: str) -> GuardrailPlot:
    series = _merged(guardrail.legend, ranged(guardrail.expr("value", sel)))
    history = []
    if guardrail.history:
        history = [
            (f"{_legend(guardrail.legend, labels)} {guardrail.history_name}", points)
            for labels, points in ranged(guardrail.expr("history", sel))
        ]
    band = []
    if guardrail.band is not None:
        low, high = (ranged(expr.replace("<sel>", sel)) for expr in guardrail.band)
        highs = {frozenset(labels.items()): points for labels, points in high}
        for labels, points in low:
            other = highs.get(frozenset(labels.items()))
            if other:
                band.append((_legend(guardrail.legend, labels), points, other))
    return GuardrailPlot(guardrail, series, history, band, [])


def _slices(recording: SliceRecording, instant: Query, sel: str) -> SliceTable:
    def key(labels: dict[str, str]) -> tuple[str, ...]:
        return tuple(labels.get(k, "") for k in (*recording.labels, "dimension", "slice"))

    bounds = (
        {key(labels): value for labels, value in instant(f"{recording.bound}{{{sel}}}")}
        if recording.bound
        else {}
    )
    rows = []
    for labels, share in instant(f"{recording.share}{{{sel}}}"):
        extra = " ".join(labels.get(k, "") for k in recording.labels)
        bound = bounds.get(key(labels))
        rows.append((extra, labels.get("dimension", ""), labels.get("slice", ""), share, bound))

    def badness(row: tuple[str, str, str, float, float | None]) -> float:
        value = row[4] if row[4] is not None else row[3]
        return -value if recording.worse_above else value

    rows.sort(key=badness)
    return SliceTable(recording, rows)


def _pairs(n: float, human: float, judge: float, both: float) -> ReviewedPairs:
    """The judge x person table the recorded shares of ``n`` reviews stand for."""
    count = round(n)
    both_pass = round(both * n)
    judge_only = round((judge - both) * n)
    human_only = round((human - both) * n)
    return ReviewedPairs(
        both_pass, judge_only, human_only, max(0, count - both_pass - judge_only - human_only)
    )


def _reviews(
    instant: Query, sel: str, window: str, review_window: str, recorded: set[str]
) -> list[ReviewLine]:
    reviewed = f"rag:faithfulness_reviewed:increase{review_window}"
    if reviewed not in recorded:
        return []

    def by_judge(name: str) -> dict[str, float]:
        if name not in recorded:
            return {}
        return {labels.get("judge", ""): v for labels, v in instant(f"{name}{{{sel}}}")}

    shares = {
        who: by_judge(f"rag:faithfulness_reviewed_{who}_pass:ratio{review_window}")
        for who in ("human", "judge", "both")
    }
    low = by_judge(f"rag:faithfulness_judge_bias:lower_bound{review_window}")
    high = by_judge(f"rag:faithfulness_judge_bias:upper_bound{review_window}")
    corrected = by_judge(f"rag:faithfulness_pass:corrected_ratio{window}")
    stderr = by_judge(f"rag:faithfulness_pass:corrected_stderr{window}")
    lines = []
    for judge, n in sorted(by_judge(reviewed).items()):
        cells = [shares[who].get(judge) for who in ("human", "judge", "both")]
        pairs = None
        if n >= 1 and all(c is not None and math.isfinite(c) for c in cells):
            human, judged, both = (float(c or 0.0) for c in cells)
            pairs = _pairs(n, human, judged, both)
        estimate = None
        if judge in corrected and judge in stderr and math.isfinite(stderr[judge]):
            estimate = Estimate(corrected[judge], stderr[judge])
        lines.append(
            ReviewLine(
                judge,
                n,
                judge_bias(pairs) if pairs and pairs.n else None,
                (low[judge], high[judge]) if judge in low and judge in high else None,
                estimate,
                effective_reviews(pairs, estimate) if pairs and pairs.n and estimate else None,
            )
        )
    return lines


def build_report(
    config: Config,
    prometheus: str,
    since: str = "7d",
    until: float | None = None,
) -> GuardrailReport:
    """Everything the report shows, read from ``prometheus`` over ``since`` up to ``until``
    (default: now)."""
    end = time.time() if until is None else until
    period_s = parse_duration(since)
    start = end - period_s
    step = max(MIN_STEP_S, math.ceil(period_s / POINTS / MIN_STEP_S) * MIN_STEP_S)
    limits = config.guardrails
    sel = f'job="{limits.job}"'
    document = build_rules(config)
    recorded = recorded_names(document)

    def instant(expr: str) -> list[tuple[dict[str, str], float]]:
        return query_prometheus(prometheus, expr, end)

    def ranged(expr: str) -> list[tuple[dict[str, str], Points]]:
        return query_prometheus_range(prometheus, expr, start, end, step)

    firings = _firings(ranged, step)
    plots = _plots(config, document, ranged, sel, firings)
    slices = [_slices(recording, instant, sel) for recording in slice_recordings(config, document)]
    coverage = _coverage(instant, sel, since)
    progress = _progress(instant, sel, since)
    window = max(limits.sample_windows, key=parse_duration)
    reviews = _reviews(instant, sel, window, limits.review_correction.window, recorded)
    fields = _fields(instant, sel, since)
    missing_inputs = [
        (labels.get("detector", ""), labels.get("field", ""), value)
        for labels, value in instant(
            f"sum by (detector, field) (increase({MISSING_INPUTS_TOTAL}{{{sel}}}[{since}])) > 0"
        )
    ]
    return GuardrailReport(
        start,
        end,
        since,
        plots,
        _markers(instant, ranged, sel, since, since=start, step=step),
        firings,
        slices,
        coverage,
        progress,
        reviews,
        fields,
        missing_inputs,
    )


def _plots(
    config: Config,
    document: dict[str, Any],
    ranged: RangeQuery,
    sel: str,
    firings: list[Firing],
) -> list[GuardrailPlot]:
    """Each guardrail over the period with its alerts' firings; drift beside its MMD^2."""
    plots = []
    for guardrail in guardrails(config, document):
        plot = _plot(guardrail, ranged, sel)
        plot.firings = [f for f in firings if f.alert in guardrail.alerts]
        plots.append(plot)
    mmd = ranged(f"max by (signal) ({MMD_STATISTIC}{{{sel}}})")
    for plot in plots:
        if plot.guardrail.key == "drift":
            plot.history = [(f"MMD^2 {labels.get('signal', '')}", p) for labels, p in mmd]
    return plots


def _coverage(instant: Query, sel: str, since: str) -> dict[tuple[str, str], float]:
    """Production requests over the period by intent x document type."""
    return {
        (labels.get("intent", ""), labels.get("document_type", "")): value
        for labels, value in instant(
            "sum by (intent, document_type) "
            f"(increase({COVERAGE_REQUESTS_TOTAL}{{{sel}}}[{since}]))"
        )
    }


def _progress(instant: Query, sel: str, since: str) -> list[tuple[str, float]]:
    """The review's progress over the period: queued by stratum, verdicts, the queue now."""
    progress = [
        (f"queued for review, {labels.get('stratum', '')} stratum", value)
        for labels, value in instant(
            f"sum by (stratum) (increase({SAMPLED_TOTAL}{{{sel}}}[{since}]))"
        )
    ]
    progress += [
        ("verdicts recorded", value)
        for _, value in instant(f"sum(increase({VERDICTS_TOTAL}{{{sel}}}[{since}]))")
    ]
    progress += [
        ("items in the queue now", value) for _, value in instant(f"max({QUEUE_ITEMS}{{{sel}}})")
    ]
    return progress


def _fields(instant: Query, sel: str, since: str) -> list[tuple[str, float, float]]:
    """(field, requests without it, requests) over the period, most often missing first."""
    present = {
        labels.get("field", ""): value
        for labels, value in instant(f"sum by (field) (increase({FIELDS_TOTAL}{{{sel}}}[{since}]))")
    }
    missing = {
        labels.get("field", ""): value
        for labels, value in instant(
            f'sum by (field) (increase({FIELDS_TOTAL}{{{sel}, present="false"}}[{since}]))'
        )
    }
    return sorted(
        ((name, missing.get(name, 0.0), total) for name, total in present.items()),
        key=lambda row: -row[1] / row[2] if row[2] else 0.0,
    )


def write_report(
    config: Config, prometheus: str, out: Path, since: str = "7d", until: float | None = None
) -> GuardrailReport:
    """Read the report from ``prometheus`` and write ``out`` (.html or .md)."""
    suffix = out.suffix.lower()
    if suffix not in (".html", ".htm", ".md"):
        raise ValueError(f"--out {out}: write .html or .md")
    report = build_report(config, prometheus, since, until)
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".md":
        out.write_text(render_markdown(report, prometheus, out), encoding="utf-8")
    else:
        out.write_text(render_html(report, prometheus), encoding="utf-8")
    return report


def summary(report: GuardrailReport) -> str:
    """One line for the terminal."""
    alerts = len({(f.alert, f.labels) for f in report.firings})
    return (
        f"{len(report.plots)} guardrails, {len(report.firings)} firing spans of {alerts} "
        f"alerts, {len(report.markers)} events, {sum(len(t.rows) for t in report.slices)} "
        "slice cells"
    )
