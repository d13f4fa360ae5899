"""``rag-monitor report shadow``: the paired comparison as self-contained HTML or Markdown.

Everything from the store is escaped: ids, intents and (with text storage on) queries and
answers are production data, and production text is hostile.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from detectors.shadow.comparison import Comparison, Estimate, Verdict, compare
from detectors.shadow.store import PairStore
from monitor.contract.durations import parse_duration
from monitor.contract.report_tables import Table, tables_html, tables_markdown


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M UTC")


def _number(value: float | None, metric: str) -> str:
    if value is None:
        return "-"
    if metric.startswith("latency_"):
        return f"{value:+.3f} s"
    if metric == "cost_usd":
        return f"{value:+.6f} USD"
    return f"{value:+.3f}"


def _interval(estimate: Estimate) -> str:
    if estimate.low is None or estimate.high is None:
        return "-"
    low, high = (_number(v, estimate.metric) for v in (estimate.low, estimate.high))
    return f"[{low}, {high}]"


def verdict_line(verdict: Verdict, comparison: Comparison) -> str:
    """One guardrail's verdict with what is not in it: never a clean verdict over gaps."""
    estimate = verdict.estimate
    shown = (
        f"mean {_number(estimate.mean, estimate.metric)}, 95% CI {_interval(estimate)}"
        if estimate.n
        else "no scorable pair"
    )
    return (
        f"{verdict.variant} {estimate.metric}: {verdict.word} ({shown}, n = {estimate.n} "
        f"pairs; not in n: {verdict.unscorable} unscorable pairs, {comparison.unmatched} "
        "halves that never paired)"
    )


def _estimate_row(variant: str, estimate: Estimate) -> list[str]:
    mean = _number(estimate.mean, estimate.metric)
    return [variant, estimate.metric, mean, _interval(estimate), str(estimate.n)]


def _tables(comparison: Comparison) -> list[Table]:
    head = ["variant", "metric", "mean delta", "95% CI", "n"]
    deltas = [
        _estimate_row(variant, estimate)
        for variant, estimates in comparison.estimates.items()
        for estimate in estimates
    ]
    disagreement = [_estimate_row(v, e) for v, e in comparison.disagreement.items()]
    intents = [[v, i, *_estimate_row(v, e)[1:]] for v, i, e in comparison.by_intent]
    missing = [[v, o, str(n)] for (v, o), n in sorted(comparison.missing.items())]
    with_text = any(r.query is not None for r in comparison.regressions)
    regressions = [
        [r.metric, _number(r.delta, r.metric), r.production, r.shadow, r.intent]
        + ([r.query or "", r.production_answer or "", r.shadow_answer or ""] if with_text else [])
        for r in comparison.regressions
    ]
    regression_head = ["metric", "delta", "production trace", "shadow trace", "intent"]
    if with_text:  # review text storage is on: the store kept the text
        regression_head += ["query", "production answer", "shadow answer"]
    return [
        (
            "Verdicts",
            [],
            [],
            [verdict_line(v, comparison) for v in comparison.verdicts] or ["No joined pair."],
        ),
        (
            "Paired deltas (shadow - production)",
            head,
            deltas,
            [
                "retrieval_overlap is the Jaccard overlap, answer_changed the share of pairs whose "
                "normalised answers differ, false_exclusion the shadow's minus production's."
            ],
        ),
        (
            "False-exclusion disagreement (share of pairs)",
            ["variant", "metric", "share", "95% CI", "n"],
            disagreement,
            [],
        ),
        ("By intent", ["variant", "intent", *head[1:]], intents, []),
        (
            "Missing pairs",
            ["variant", "outcome", "halves"],
            missing,
            [
                f"{sum(comparison.pairs.values())} joined pairs; {comparison.unmatched} halves "
                "never paired (timed_out: no twin within pair_ttl_s, evicted: over max_pending, "
                "stopped: held at a replica's stop); duplicates are in no pair."
            ],
        ),
        (
            "Largest regressions",
            regression_head,
            regressions,
            [],
        ),
    ]


def _subtitle(comparison: Comparison) -> str:
    return f"{_iso(comparison.generated)}, pairs decided in the last {comparison.since}"


def render_html(comparison: Comparison) -> str:
    return tables_html("Shadow comparison", _subtitle(comparison), _tables(comparison))


def render_markdown(comparison: Comparison) -> str:
    return tables_markdown("Shadow comparison", _subtitle(comparison), _tables(comparison))


def write_report(store: PairStore, since: str, out: Path, now: float | None = None) -> Comparison:
    """Compare the pairs of the last ``since`` and write ``out`` (.html or .md)."""
    suffix = out.suffix.lower()
    if suffix not in (".html", ".htm", ".md"):
        raise ValueError(f"--out {out}: write .html or .md")
    generated = time.time() if now is None else now
    comparison = compare(store.since(generated - parse_duration(since)), since, generated)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = render_markdown(comparison) if suffix == ".md" else render_html(comparison)
    out.write_text(text, encoding="utf-8")
    return comparison
