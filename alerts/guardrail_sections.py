"""The pages of ``rag-monitor report guardrails``: each section as plain text (title, table,
sentences, figures), rendered as one self-contained HTML page or as Markdown with its
figures beside it. Every label value comes from production and is escaped."""

from __future__ import annotations

import html
import math
from pathlib import Path

from alerts.guardrail_data import (
    FIELD_MISSING_ALERT,
    NO_SLICE_DATA,
    OTHER_REPORTS,
    GuardrailPlot,
    GuardrailReport,
    ReviewLine,
)
from alerts.guardrail_figures import coverage_png, plot_png, when
from monitor.contract.figures import png_img
from monitor.contract.report_tables import markdown_text


def _stamp(epoch: float) -> str:
    return when(epoch).strftime("%Y-%m-%d %H:%M UTC")


def _value(value: float | None, unit: str) -> str:
    if value is None or not math.isfinite(value):
        return "n/a"
    if unit == "percentunit":
        return f"{value:.2%}"
    if unit == "currencyUSD":
        return f"{value:.4f} USD"
    return f"{value:.3g}"


Section = tuple[str, list[str], list[list[str]], list[str], list[tuple[str, bytes]]]


def _sections(report: GuardrailReport, prometheus: str, suffix: str) -> list[Section]:
    """(title, head, rows, sentences, figures) of each section, as plain text: the
    renderers escape it."""
    return [
        _events(report),
        *(_guardrail(plot, report) for plot in report.plots),
        *_slices(report),
        _coverage(report),
        _review(report),
        _fields(report),
        _other_reports(report, prometheus, suffix),
    ]


def _events(report: GuardrailReport) -> Section:
    marks = [[_stamp(m.at), m.kind, m.text] for m in report.markers]
    return (
        "Events in the period",
        ["when", "kind", "what"],
        marks,
        ["Releases (service.version first seen), faithfulness judge changes and "
         "embedding-model changes, drawn as dashed lines on every plot."],
        [],
    )  # fmt: skip


def _guardrail(plot: GuardrailPlot, report: GuardrailReport) -> Section:
    g = plot.guardrail
    side = "above" if g.worse_above else "below"
    rows = [
        [f.alert, f.labels, _stamp(f.start), f"{(f.end - f.start) / 60:.0f} min"]
        for f in plot.firings
    ]
    sentences = [f"Breach {side} {_value(g.threshold, g.unit)} (guardrails); {g.note}."]
    if not plot.series:
        sentences.append("No data in the period.")
    return (
        g.title,
        ["alert", "labels", "fired", "for"],
        rows,
        sentences,
        [(f"{g.title} over the period", plot_png(plot, report))] if plot.series else [],
    )


def _slices(report: GuardrailReport) -> list[Section]:
    sections: list[Section] = []
    for table in report.slices:
        r = table.recording
        rows = [
            [extra, dim, value, _value(share, r.unit), _value(bound, r.unit)]
            for extra, dim, value, share, bound in table.rows
        ]
        bound_name = "bound" if r.bound else "(no bound recorded)"
        sentences = [
            f"{r.share}, worst first by {r.bound or r.share}; the guardrail is "
            f"{_value(r.threshold, r.unit)}."
        ]
        if not rows:
            sentences.append(f"{NO_SLICE_DATA} in Prometheus for {r.share}.")
        sections.append(
            (
                f"Slices: {r.guardrail}",
                [" ".join(r.labels) or "-", "dimension", "slice", "share", bound_name],
                rows,
                sentences,
                [],
            )
        )
    if not report.slices:
        sections.append(
            (
                "Slices",
                [],
                [],
                [f"{NO_SLICE_DATA}: the rules generate no slice recording "
                 "(rag:slice_*; detectors.slices)."],
                [],
            )
        )  # fmt: skip
    return sections


def _coverage(report: GuardrailReport) -> Section:
    coverage_rows = [
        [intent, doc, f"{n:.0f}"] for (intent, doc), n in sorted(report.coverage.items())
    ]
    return (
        "Coverage: intent x document type",
        ["intent", "document type", "requests"],
        coverage_rows,
        ["Production requests by intent and by each document type among their contexts "
         "(none: no context names a type). An empty cell is traffic no guardrail slice "
         "sees."],
        [("coverage heat map", coverage_png(report.coverage))] if report.coverage else [],
    )  # fmt: skip


def _review(report: GuardrailReport) -> Section:
    review_rows = [[what, f"{n:.0f}"] for what, n in report.progress]
    review_sentences = [_review_sentence(line) for line in report.reviews]
    if not report.reviews:
        review_sentences.append("No random reviews recorded (is detectors.review enabled?).")
    return (
        "Review progress, judge bias and effective reviews", ["", "count"], review_rows,
        review_sentences, []
    )  # fmt: skip


def _review_sentence(line: ReviewLine) -> str:
    text = f"Judge {line.judge}: {line.reviews:.0f} random reviews"
    if line.bias is not None:
        text += f"; bias (judge minus reviewers) {line.bias.share:+.1%}"
    if line.bias_bounds is not None:
        text += f" [{line.bias_bounds[0]:+.1%}, {line.bias_bounds[1]:+.1%}]"
    if line.corrected is not None:
        low, high = line.corrected.interval(1.645)
        text += f"; corrected pass share {line.corrected.share:.1%} [{low:.1%}, {high:.1%}]"
    if line.effective is not None:
        text += f", worth {line.effective:.0f} reviews alone"
    return text + "."


def _fields(report: GuardrailReport) -> Section:
    field_rows = [
        [name, f"{missing:.0f}", f"{total:.0f}", f"{missing / total:.2%}" if total else "n/a"]
        for name, missing, total in report.fields
    ]
    fired = report.firings_of([FIELD_MISSING_ALERT])
    field_sentences = [
        f"{FIELD_MISSING_ALERT} fired {len(fired)} times in the period"
        + "".join(f"; {f.labels} at {_stamp(f.start)}" for f in fired[:10])
        + "."
    ]
    field_sentences += [
        f"{detector} counted {n:.0f} requests without {name} as missing instead of judging them."
        for detector, name, n in report.missing_inputs
    ]
    return (
        "Field coverage", ["field", "requests without it", "requests", "share"], field_rows,
        field_sentences, []
    )  # fmt: skip


def _other_reports(report: GuardrailReport, prometheus: str, suffix: str) -> Section:
    links = []
    for name, command in OTHER_REPORTS:
        file_name = f"{name}{suffix}"
        links.append(
            [file_name, command.format(since=report.period, url=prometheus, name=file_name)]
        )
    return (
        "Other reports", ["file", "written by"], links,
        ["Written next to this one by the weekly job (deploy/kubernetes/guardrail-report-"
         "cronjob.yaml); run the command where a file is missing."], []
    )  # fmt: skip


_STYLE = (
    "<style>body{font-family:system-ui,sans-serif;max-width:64rem;margin:2rem auto;"
    "padding:0 1rem;color:#222}table{border-collapse:collapse;margin:.5rem 0}td,th{border:"
    "1px solid #ccc;padding:.25rem .5rem;vertical-align:top}th{background:#f4f4f4}"
    "small{color:#666}img{display:block;margin:.5rem 0}</style>"
)


def render_html(report: GuardrailReport, prometheus: str) -> str:
    esc = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Guardrails: weekly review"
        f"</title>{_STYLE}</head><body>",
        "<h1>Guardrails: weekly review</h1>",
        f"<p><small>{esc(_stamp(report.since))} to {esc(_stamp(report.until))}, from "
        f"{esc(prometheus)}</small></p>",
    ]
    for title, head, rows, sentences, figures in _sections(report, prometheus, ".html"):
        parts.append(f"<h2>{esc(title)}</h2>")
        parts.extend(png_img(png, alt) for alt, png in figures)
        parts.extend(f"<p>{esc(s)}</p>" for s in sentences)
        if rows:
            parts.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>")
            parts.extend(
                "<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows
            )
            parts.append("</table>")
        if title == "Other reports":
            parts.append(
                "<p>"
                + " ".join(f"<a href='{esc(row[0], quote=True)}'>{esc(row[0])}</a>" for row in rows)
                + "</p>"
            )
    parts.append("</body></html>")
    return "\n".join(parts)


def render_markdown(report: GuardrailReport, prometheus: str, out: Path) -> str:
    """The Markdown page; its figures are written beside ``out``."""
    md = markdown_text
    lines = [
        "# Guardrails: weekly review",
        "",
        f"_{md(_stamp(report.since))} to {md(_stamp(report.until))}, from {md(prometheus)}_",
    ]
    number = 0
    for title, head, rows, sentences, figures in _sections(report, prometheus, ".md"):
        lines += ["", f"## {md(title)}"]
        for alt, png in figures:
            number += 1
            image = out.with_name(f"{out.stem}-{number}.png")
            image.write_bytes(png)
            lines += ["", f"![{md(alt)}]({image.name})"]
        lines += [line for s in sentences for line in ("", md(s))]
        if rows:
            lines += ["", "| " + " | ".join(md(h) or "-" for h in head) + " |"]
            lines.append("|" + "---|" * len(head))
            lines += ["| " + " | ".join(md(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"
