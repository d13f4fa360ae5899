"""The figures of ``rag-monitor report guardrails``: each guardrail over the period and the
coverage heat map, as PNG bytes. Every label value comes from production and is drawn as
plain text."""

from __future__ import annotations

from datetime import UTC, datetime

from alerts.guardrail_data import GuardrailPlot, GuardrailReport
from monitor.contract.figures import png_bytes, pyplot

_MARKER_COLOURS = {"release": "purple", "judge": "tab:brown", "embedding model": "tab:cyan"}


def _plain(text: str) -> str:
    """A label value as matplotlib text: a ``$`` would start mathtext (and a hostile
    value would fail the figure)."""
    return text.replace("$", r"\$")


def when(epoch: float) -> datetime:
    return datetime.fromtimestamp(epoch, tz=UTC)


def plot_png(plot: GuardrailPlot, report: GuardrailReport) -> bytes:
    """The guardrail over the period: its value (and the judge's own share, or MMD^2 for
    drift), its interval as a band, its threshold, its alerts' firing spans shaded and the
    markers as vertical lines."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(10, 3.4))
    g = plot.guardrail
    for legend, low, high in plot.band:
        common = sorted(set(dict(low)) & set(dict(high)))
        lows, highs = dict(low), dict(high)
        axis.fill_between(
            [when(t) for t in common],
            [lows[t] for t in common],
            [highs[t] for t in common],
            alpha=0.2,
            color="tab:blue",
            label=_plain(f"{legend} interval"),
        )
    for legend, points in plot.series:
        axis.plot(
            [when(t) for t, _ in points], [v for _, v in points], lw=1.2, label=_plain(legend)
        )
    target = axis
    if g.key == "drift" and plot.history:
        axis.set_yscale("log")
        target = axis.twinx()
        target.set_ylabel("MMD$^2$")
    for legend, points in plot.history:
        target.plot(
            [when(t) for t, _ in points],
            [v for _, v in points],
            lw=0.8,
            ls="--",
            color="0.45",
            label=_plain(legend),
        )
    axis.axhline(g.threshold, color="tab:red", ls=":", lw=1.2, label=f"guardrail {g.threshold:g}")
    if g.page is not None:
        axis.axhline(g.page, color="tab:red", ls="-.", lw=0.8, label=f"page {g.page:g}")
    for firing in plot.firings:
        axis.axvspan(when(firing.start), when(firing.end), color="tab:red", alpha=0.15, lw=0)
    for marker in report.markers:
        axis.axvline(when(marker.at), color=_MARKER_COLOURS[marker.kind], ls="--", lw=1)
    if g.unit == "percentunit":  # a band from a handful of reviews may leave [0, 1]
        axis.set_ylim(max(0.0, axis.get_ylim()[0]), min(1.0, axis.get_ylim()[1]))
    axis.set_xlim(when(report.since), when(report.until))
    axis.set_title(f"{g.title}: red spans = {', '.join(g.alerts)} firing; dashed = events")
    # Below the axes: inside, the legend of a share near 1 would hide its lines.
    axis.legend(loc="upper center", bbox_to_anchor=(0.5, -0.3), fontsize=7, ncol=3)
    figure.autofmt_xdate()
    figure.tight_layout()
    return png_bytes(figure)


def coverage_png(coverage: dict[tuple[str, str], float]) -> bytes:
    """The coverage matrix as a heat map: requests per intent x document type."""
    import numpy as np

    plt = pyplot()
    intents = sorted({i for i, _ in coverage})
    types = sorted({t for _, t in coverage})
    matrix = np.array([[coverage.get((i, t), 0.0) for t in types] for i in intents])
    figure, axis = plt.subplots(figsize=(1.6 + 1.3 * len(types), 1.2 + 0.45 * len(intents)))
    image = axis.imshow(matrix, cmap="Blues", aspect="auto")
    axis.set_xticks(
        range(len(types)), labels=[_plain(t) for t in types], rotation=30, ha="right", fontsize=8
    )
    axis.set_yticks(range(len(intents)), labels=[_plain(i) for i in intents], fontsize=8)
    for row, column in np.ndindex(matrix.shape):
        axis.text(column, row, f"{matrix[row, column]:.0f}", ha="center", va="center", fontsize=7)
    figure.colorbar(image, ax=axis, label="requests")
    axis.set_title("Requests by intent x document type")
    figure.tight_layout()
    return png_bytes(figure)
