"""``rag-monitor report drift``: the weekly drift report from the persisted state.

What a person needs to decide whether the query mix moved: the verdict for the
period, the p-value and MMD^2 over time, the share of windows flagged, which
topic clusters grew or shrank against the reference (k-means on the vectors,
with example queries when ``keep_examples`` is on) and, when the reference was
replaced in the period, how stable the neighbourhoods of a pinned probe set
are. HTML (plot embedded) or Markdown (plot written next to it).
"""

from __future__ import annotations

import html
import itertools
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from detectors.drift.migration import Migration, build_migration, change_lines
from detectors.drift.neighbours import (
    NeighbourStability,
    assign,
    clusters_for,
    kmeans,
    neighbour_stability,
)
from detectors.drift.result import Vectors
from detectors.drift.store import DriftStore, Reference, TestRecord
from monitor.contract.config import Config
from monitor.contract.durations import parse_duration
from monitor.contract.figures import png_bytes, png_img, pyplot

VERDICT_LEVEL = 0.01  # binomial test of the flagged share against the false-alarm rate
SHOWN_CLUSTERS = 6
EXAMPLES_PER_CLUSTER = 3


@dataclass
class ClusterShift:
    """One k-means cluster: its share of the reference and of the recent sample."""

    cluster: int
    reference_share: float
    recent_share: float
    examples: list[str] = field(default_factory=list)

    @property
    def change(self) -> float:
        return self.recent_share - self.reference_share


@dataclass
class DriftReport:
    since: float
    until: float
    tests: list[TestRecord]
    p_value: float
    verdict: str
    summary: str
    clusters: list[ClusterShift]
    recent_vectors: int
    stability: list[NeighbourStability]
    reference_changes: list[float]
    migration: Migration

    @property
    def flagged(self) -> int:
        return sum(t.is_drift for t in self.tests)


# --- analysis --------------------------------------------------------------------------------


def _verdict(tests: list[TestRecord], level: float) -> tuple[str, str]:
    from scipy.stats import binomtest

    if not tests:
        return "no data", "No drift test ran in the period (is traffic reaching the sidecar?)."
    flagged = sum(t.is_drift for t in tests)
    share = flagged / len(tests)
    excess = binomtest(flagged, len(tests), level, alternative="greater").pvalue
    latest = "flagged" if tests[-1].is_drift else "not flagged"
    detail = (
        f"{flagged} of {len(tests)} windows flagged ({share:.0%}); a stable query mix flags "
        f"about {level:.0%} by chance. The latest window is {latest}."
    )
    if excess < VERDICT_LEVEL:
        return "DRIFT", f"The query mix moved away from the reference. {detail}"
    return "stable", f"No evidence that the query mix moved. {detail}"


def cluster_shifts(
    reference: Reference, recent: Vectors, recent_texts: list[str | None]
) -> list[ClusterShift]:
    """Clusters of reference + recent vectors, the largest changes of share first."""
    if len(recent) < 2 or recent.shape[1] != reference.vectors.shape[1]:
        return []
    both = np.concatenate([reference.vectors, recent])
    k = clusters_for(len(both))
    labels = assign(both, kmeans(both, k))
    ref_labels, recent_labels = labels[: len(reference.vectors)], labels[len(reference.vectors) :]
    ref_texts = reference.texts or [None] * len(reference.vectors)
    shifts = []
    for cluster in range(k):
        shift = ClusterShift(
            cluster,
            float(np.mean(ref_labels == cluster)),
            float(np.mean(recent_labels == cluster)),
        )
        # Examples from where the cluster now lives: recent queries if it grew.
        pool = (
            [t for t, c in zip(recent_texts, recent_labels, strict=True) if c == cluster]
            if shift.change >= 0
            else [t for t, c in zip(ref_texts, ref_labels, strict=True) if c == cluster]
        )
        shift.examples = [t for t in pool if t][:EXAMPLES_PER_CLUSTER]
        shifts.append(shift)
    shifts.sort(key=lambda s: abs(s.change), reverse=True)
    return shifts


def build_report(
    store: DriftStore,
    config: Config,
    period_s: float,
    now: float | None = None,
    prometheus: str | None = None,
) -> DriftReport:
    """Everything the report shows, from the stored state (and Prometheus, when given).

    The clusters compare the latest test's representation with its own reference; the
    probe set is compared only between references of its own representation.
    """
    until = time.time() if now is None else now
    since = until - period_s
    tests = store.tests(since, until)
    p_value = config.detectors.drift.p_value
    verdict, summary = _verdict(tests, p_value)
    latest = tests[-1].representation if tests else None
    reference = store.reference(representation=latest)
    recent, recent_texts = store.samples(since, until, latest)
    clusters = [] if reference is None else cluster_shifts(reference, recent, recent_texts)
    stability = []
    probes, _, probe_representation = store.probes()
    references = store.references()
    changes = [r.created for r in references[1:] if since <= r.created <= until]
    for representation in {r.representation for r in references}:
        versions = [r for r in references if r.representation == representation]
        pinned = probes if representation == probe_representation else probes[:0]
        for old_info, new_info in itertools.pairwise(versions):
            old, new = store.reference(old_info.id), store.reference(new_info.id)
            if since <= new_info.created <= until and old is not None and new is not None:
                stability.append(neighbour_stability(old, new, pinned))
    stability.sort(key=lambda s: s.when)
    migration = build_migration(store, config.detectors.drift, since, until, prometheus)
    return DriftReport(
        since,
        until,
        tests,
        p_value,
        verdict,
        summary,
        clusters,
        len(recent),
        stability,
        changes,
        migration,
    )


# --- rendering -------------------------------------------------------------------------------


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


def plot_png(report: DriftReport) -> bytes:
    """p-value and MMD^2 over time, flagged windows in red, reference changes dashed."""
    plt = pyplot()
    figure, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    times = [datetime.fromtimestamp(t.time, tz=UTC) for t in report.tests]
    flags = np.array([t.is_drift for t in report.tests], dtype=bool)
    p_values = np.array([np.nan if t.p_value is None else t.p_value for t in report.tests])
    statistics = np.array([t.statistic for t in report.tests])
    thresholds = np.array([np.nan if t.threshold is None else t.threshold for t in report.tests])
    colours = np.where(flags, "tab:red", "tab:blue")
    if times:
        top.plot(times, np.clip(p_values, 1e-4, 1), color="0.6", lw=0.8)
        top.scatter(times, np.clip(p_values, 1e-4, 1), c=colours, s=14, zorder=3)
        bottom.plot(times, statistics, color="0.6", lw=0.8)
        bottom.scatter(times, statistics, c=colours, s=14, zorder=3)
        bottom.plot(times, thresholds, color="tab:orange", lw=1, ls=":", label="threshold")
    top.axhline(report.p_value, color="tab:orange", lw=1, ls=":", label=f"p = {report.p_value}")
    top.set_yscale("log")
    top.set_ylabel("p-value")
    top.legend(loc="lower left", fontsize=8)
    bottom.set_ylabel("MMD$^2$")
    if times:  # the threshold line is drawn only with tests
        bottom.legend(loc="upper left", fontsize=8)
    for change in report.reference_changes:
        for axis in (top, bottom):
            axis.axvline(datetime.fromtimestamp(change, tz=UTC), color="k", ls="--", lw=0.8)
    top.set_title("Query-embedding drift: red = window flagged, dashed = new reference")
    figure.autofmt_xdate()
    figure.tight_layout()
    return png_bytes(figure)


def _cluster_rows(report: DriftReport) -> list[tuple[str, str, str, str, list[str]]]:
    rows = []
    for shift in report.clusters[:SHOWN_CLUSTERS]:
        direction = "grew" if shift.change > 0 else "shrank" if shift.change < 0 else "same"
        rows.append(
            (
                f"#{shift.cluster}",
                f"{shift.reference_share:.0%}",
                f"{shift.recent_share:.0%}",
                f"{direction} {abs(shift.change):.0%}",
                shift.examples,
            )
        )
    return rows


def _stability_lines(report: DriftReport) -> list[str]:
    lines = []
    for s in report.stability:
        head = f"Reference {s.old_id} -> {s.new_id} ({_stamp(s.when)}): "
        if not s.comparable:
            lines.append(
                head + "not comparable (the probe set is of another representation or "
                "dimension: re-embed the probe set and evaluate the new index)."
            )
        else:
            lines.append(
                head + f"mean neighbourhood overlap {s.mean_overlap:.0%}, "
                f"{s.stable_share:.0%} of {s.probes} probes keep at least half their topics."
            )
    return lines


def _migration_lines(report: DriftReport) -> list[str]:
    if report.migration.changes:
        return change_lines(report.migration)
    return [
        "No representation (embedding model) change in the period.",
        *change_lines(report.migration),
    ]


def _period(report: DriftReport) -> str:
    return f"{_stamp(report.since)} to {_stamp(report.until)}"


def render_html(report: DriftReport, png: bytes) -> str:
    esc = html.escape
    colour = {"DRIFT": "#b00020", "stable": "#1b7f3b"}.get(report.verdict, "#555")
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Query drift report</title>",
        "<style>body{font-family:system-ui,sans-serif;max-width:60rem;margin:2rem auto;"
        "padding:0 1rem;color:#222}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
        "padding:.3rem .6rem;vertical-align:top}th{background:#f4f4f4}.v{font-size:1.6rem;"
        f"font-weight:700;color:{colour}}}small{{color:#666}}</style></head><body>",
        "<h1>Query-embedding drift report</h1>",
        f"<p><small>{esc(_period(report))}</small></p>",
        f"<p class='v'>{esc(report.verdict)}</p><p>{esc(report.summary)}</p>",
    ]
    if report.tests:
        parts.append(
            f"<p>Share of windows flagged: <b>{report.flagged / len(report.tests):.0%}</b> "
            f"({report.flagged} of {len(report.tests)}).</p>"
        )
        parts.append(png_img(png, "p-value and MMD statistic over time"))
    parts.append("<h2>What changed</h2>")
    rows = _cluster_rows(report)
    if rows:
        parts.append(
            f"<p>k-means clusters of the reference and of {report.recent_vectors} sampled "
            "recent queries, largest change of share first.</p><table><tr><th>cluster</th>"
            "<th>reference</th><th>recent</th><th>change</th><th>example queries</th></tr>"
        )
        for name, ref, recent, change, examples in rows:
            shown = "<br>".join(esc(e) for e in examples) or "<small>(not kept)</small>"
            parts.append(
                f"<tr><td>{name}</td><td>{ref}</td><td>{recent}</td><td>{change}</td>"
                f"<td>{shown}</td></tr>"
            )
        parts.append("</table>")
    else:
        parts.append("<p>No recent vectors in the period to compare with the reference.</p>")
    parts.append("<h2>Representation changes</h2><ul>")
    parts.extend(f"<li>{esc(line)}</li>" for line in _migration_lines(report))
    parts.append("</ul>")
    stability = _stability_lines(report)
    if stability:
        parts.append("<h2>Reference changes: neighbour stability of the probe set</h2><ul>")
        parts.extend(f"<li>{esc(line)}</li>" for line in stability)
        parts.append("</ul>")
    parts.append(
        "<p><small>MMD two-sample test of the latest window of query vectors against the "
        "reference; p-values from permutations. Read the example queries before acting: "
        "a flagged window says the mix changed, not why.</small></p></body></html>"
    )
    return "\n".join(parts)


def render_markdown(report: DriftReport, image_name: str | None) -> str:
    lines = [
        "# Query-embedding drift report",
        "",
        f"_{_period(report)}_",
        "",
        f"**Verdict: {report.verdict}.** {report.summary}",
        "",
    ]
    if report.tests and image_name:
        lines += [
            f"Share of windows flagged: **{report.flagged / len(report.tests):.0%}** "
            f"({report.flagged} of {len(report.tests)}).",
            "",
            f"![p-value and MMD statistic over time]({image_name})",
            "",
        ]
    lines += ["## What changed", ""]
    rows = _cluster_rows(report)
    if rows:
        lines += [
            "| cluster | reference | recent | change | example queries |",
            "|---|---|---|---|---|",
        ]
        for name, ref, recent, change, examples in rows:
            shown = "<br>".join(e.replace("|", "\\|") for e in examples) or "(not kept)"
            lines.append(f"| {name} | {ref} | {recent} | {change} | {shown} |")
    else:
        lines.append("No recent vectors in the period to compare with the reference.")
    lines += ["", "## Representation changes", ""]
    lines += [f"- {line}" for line in _migration_lines(report)]
    stability = _stability_lines(report)
    if stability:
        lines += ["", "## Reference changes: neighbour stability of the probe set", ""]
        lines += [f"- {line}" for line in stability]
    return "\n".join(lines) + "\n"


def write_report(
    config: Config,
    period: str,
    out: Path,
    now: float | None = None,
    prometheus: str | None = None,
) -> DriftReport:
    """Build the report from ``config.service.state_dir`` and write ``out`` (.html or .md)."""
    suffix = out.suffix.lower()
    if suffix not in (".html", ".htm", ".md"):
        raise ValueError(f"--out {out}: write .html or .md")
    period_s = parse_duration(period)
    store = DriftStore(config.service.state_dir, create=False)
    try:
        report = build_report(store, config, period_s, now, prometheus)
    finally:
        store.close()
    png = plot_png(report)
    out.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".md":
        image = out.with_name(out.stem + "-drift.png")
        image.write_bytes(png)
        out.write_text(render_markdown(report, image.name), encoding="utf-8")
    else:
        out.write_text(render_html(report, png), encoding="utf-8")
    return report
