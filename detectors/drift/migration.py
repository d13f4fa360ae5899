"""The weekly report's "representation changes" section: each encoder change of the period.

For each change (from the store: when, from, to) it gives the traffic share of
each representation (the store's hourly counts), recall@k and the false-exclusion
ratio on labelled queries over the day before and the day after (read from
Prometheus when ``--prometheus`` is given: the filter-exclusion detector records
them there, summed over every replica), and, with ``drift.embedder`` set, the
pinned probe set's neighbour stability across the change (the samples of the
embedder's representation before and after it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime

from detectors.drift.config import DriftConfig
from detectors.drift.detector import pinned_representation
from detectors.drift.neighbours import NEIGHBOURS, NeighbourStability, neighbour_stability
from detectors.drift.store import DriftStore, Reference
from monitor.contract.names import ELIGIBLE_QUERIES_TOTAL, FALSE_EXCLUSIONS_TOTAL, RETRIEVAL_RECALL
from monitor.contract.prometheus_query import query_prometheus

QUALITY_WINDOW_S = 86400.0  # labelled queries are few: a day on each side of the change
# The filter-exclusion detector's series (their names are the core's: monitor/contract/names.py).
FALSE_EXCLUSION_RATIO = (
    f"sum(increase({FALSE_EXCLUSIONS_TOTAL}[{{w}}s]))"
    f" / sum(increase({ELIGIBLE_QUERIES_TOTAL}[{{w}}s]))"
)
RECALL_AT_K = (
    f"sum by (k) (increase({RETRIEVAL_RECALL}_sum[{{w}}s]))"
    f" / sum by (k) (increase({RETRIEVAL_RECALL}_count[{{w}}s]))"
)


@dataclass
class Quality:
    """Labelled-query quality over one window: recall@k per k, the false-exclusion ratio
    (NaN: no labelled query in the window)."""

    recall: dict[str, float] = field(default_factory=dict)
    false_exclusion_ratio: float = math.nan


@dataclass
class RepresentationChange:
    time: float
    old: str
    new: str
    before: Quality | None = None
    after: Quality | None = None
    stability: NeighbourStability | None = None


@dataclass
class Migration:
    """The section: the changes, the share of each representation, what could not be read."""

    changes: list[RepresentationChange]
    shares: dict[str, float]
    note: str = ""


def _quality(url: str, start: float, end: float) -> Quality:
    window = max(int(end - start), 1)  # whole seconds: PromQL ranges take no fraction
    quality = Quality()
    for labels, value in query_prometheus(url, RECALL_AT_K.format(w=window), end):
        quality.recall[labels.get("k", "?")] = value
    ratio = query_prometheus(url, FALSE_EXCLUSION_RATIO.format(w=window), end)
    if ratio:
        quality.false_exclusion_ratio = ratio[0][1]
    return quality


def _sample(store: DriftStore, representation: str, start: float, end: float) -> Reference:
    vectors, _ = store.samples(start, end, representation)
    return Reference(0, start, "samples", representation, vectors, None)


def _stability(
    store: DriftStore, config: DriftConfig, change: RepresentationChange, since: float, until: float
) -> NeighbourStability | None:
    """Probe neighbourhoods in the pinned representation from ``since`` to the change and
    from the change to ``until``."""
    pinned = pinned_representation(config)
    probes, _, probe_representation = store.probes()
    if pinned is None or probe_representation != pinned:
        return None
    before = _sample(store, pinned, since, change.time)
    after = _sample(store, pinned, change.time, until)
    if min(len(before.vectors), len(after.vectors)) < NEIGHBOURS:
        return None
    stability = neighbour_stability(before, after, probes)
    stability.when = change.time
    return stability


def build_migration(
    store: DriftStore, config: DriftConfig, since: float, until: float, prometheus: str | None
) -> Migration:
    """The representation changes of the period with what the report says about each."""
    counts: dict[str, int] = {}
    for _, name, vectors in store.traffic(since, until):
        counts[name] = counts.get(name, 0) + vectors
    total = max(sum(counts.values()), 1)
    shares = {name: n / total for name, n in sorted(counts.items(), key=lambda c: -c[1])}
    migration = Migration([], shares)
    found = store.changes(since, until)
    # Each change is compared between the one before it and the one after it.
    bounds = [since, *(at for at, _, _ in found), until]
    for number, (at, old, new) in enumerate(found):
        change = RepresentationChange(at, old, new)
        change.stability = _stability(store, config, change, bounds[number], bounds[number + 2])
        migration.changes.append(change)
    if prometheus is None:
        migration.note = (
            "Recall@k and false-exclusion ratio: run with --prometheus URL to read them "
            "from Prometheus."
        )
        return migration
    try:
        for change in migration.changes:
            day_after = min(change.time + QUALITY_WINDOW_S, until)
            change.before = _quality(prometheus, change.time - QUALITY_WINDOW_S, change.time)
            change.after = _quality(prometheus, change.time, day_after)
    except (OSError, ValueError, KeyError) as exc:
        migration.note = f"Prometheus at {prometheus} could not be read: {exc}"
    return migration


# --- rendering: plain lines, each renderer escapes them ------------------------------------


def _percent(value: float) -> str:
    return "no labelled queries" if math.isnan(value) else f"{value:.1%}"


def _quality_text(label: str, quality: Quality) -> str:
    recall = ", ".join(f"recall@{k} {v:.3f}" for k, v in sorted(quality.recall.items()))
    return (
        f"{label}: {recall or 'no recall@k recorded'}; "
        f"false-exclusion ratio {_percent(quality.false_exclusion_ratio)}"
    )


def change_lines(migration: Migration) -> list[str]:
    """One line per change, then the traffic shares and the note."""
    lines = []
    for change in migration.changes:
        when = datetime.fromtimestamp(change.time, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
        old_share = migration.shares.get(change.old, 0.0)
        new_share = migration.shares.get(change.new, 0.0)
        parts = [
            f"{when}: {change.old} -> {change.new} (traffic share in the period: "
            f"{change.old} {old_share:.0%}, {change.new} {new_share:.0%})"
        ]
        if change.before is not None and change.after is not None:
            parts += [
                _quality_text("day before", change.before),
                _quality_text("day after", change.after),
            ]
        if change.stability is not None:
            parts.append(
                f"probe set in the pinned representation: mean neighbourhood overlap "
                f"{change.stability.mean_overlap:.0%}, {change.stability.stable_share:.0%} "
                f"of {change.stability.probes} probes keep at least half their topics"
            )
        lines.append("; ".join(parts) + ".")
    shares = ", ".join(f"{name} {share:.0%}" for name, share in migration.shares.items())
    if shares:
        lines.append(f"Traffic share of each representation in the period: {shares}.")
    if migration.note:
        lines.append(migration.note)
    return lines
