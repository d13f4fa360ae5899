"""Paired deltas, bootstrap intervals, verdicts, missing pairs, and the escaped report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from detectors.shadow.comparison import (
    MIN_PAIRS,
    Estimate,
    bootstrap_mean,
    compare,
    verdict_word,
)
from detectors.shadow.model import PairHalf, PairOutcome, answer_hash, paired_deltas
from detectors.shadow.report import render_html, render_markdown, write_report
from detectors.shadow.store import PairStore

HOSTILE = "<script>alert('x')</script> | **bold**"


def half(variant: str, trace: str, **fields: object) -> PairHalf:
    return PairHalf(trace, "p", variant, time=0.0, **fields)  # type: ignore[arg-type]


def pair(i: int, generate_delta: float, **shadow: object) -> PairOutcome:
    production = PairHalf(f"{i:04x}a", f"p{i}", "production", 0.0, stages={"generate": 1.0})
    twin = PairHalf(
        f"{i:04x}b", f"p{i}", "shadow", 0.0, stages={"generate": 1.0 + generate_delta}, **shadow
    )  # type: ignore[arg-type]
    return PairOutcome("joined", f"p{i}", 100.0 + i, production, twin)


def test_paired_deltas_are_shadow_minus_production_and_none_when_a_side_lacks_it() -> None:
    """Stage and cost deltas, Jaccard overlap, answer change; None where unscorable."""
    production = half(
        "production",
        "a",
        stages={"generate": 1.0, "total": 1.5},
        cost_usd=0.010,
        retrieved=("d1", "d2", "d3"),
        answer_hash=answer_hash("Refunds  within 30 days."),
        excluded=False,
    )
    shadow = half(
        "shadow",
        "b",
        stages={"generate": 1.25},
        cost_usd=0.004,
        retrieved=("d2", "d3", "d4"),
        answer_hash=answer_hash("refunds within 30 DAYS."),
        excluded=True,
        faithfulness=0.7,
    )
    deltas = paired_deltas(production, shadow)
    assert deltas["latency_generate"] == pytest.approx(0.25)
    assert deltas["latency_total"] is None  # the shadow has no total
    assert deltas["cost_usd"] == pytest.approx(-0.006)
    assert deltas["retrieval_overlap"] == pytest.approx(2 / 4)
    assert deltas["answer_changed"] == 0.0  # case and whitespace are normalised away
    assert deltas["false_exclusion"] == 1.0
    assert deltas["faithfulness"] is None  # production was not scored


def test_bootstrap_interval_holds_the_mean_and_is_reproducible() -> None:
    """A fixed seed: the same data gives the same interval, around the sample mean."""
    values = [0.1 + 0.01 * (i % 7) for i in range(200)]
    first, second = (
        bootstrap_mean(values, "latency_generate"),
        bootstrap_mean(values, "latency_generate"),
    )
    assert first == second
    assert first.low < first.mean < first.high  # type: ignore[operator]
    assert bootstrap_mean([], "cost_usd") == Estimate("cost_usd", 0)


@pytest.mark.parametrize(
    ("low", "high", "n", "sign", "word"),
    [
        (0.1, 0.2, 50, 1, "worse"),
        (-0.2, -0.1, 50, 1, "better"),
        (-0.1, 0.2, 50, 1, "no evidence"),
        (-0.2, -0.1, 50, -1, "worse"),  # faithfulness: lower is worse
        (0.1, 0.2, MIN_PAIRS - 1, 1, "no evidence"),
    ],
    ids=["worse", "better", "straddles-zero", "lower-is-worse", "too-few-pairs"],
)
def test_verdict_needs_the_whole_interval_on_one_side(
    low: float, high: float, n: int, sign: int, word: str
) -> None:
    """better / worse only when the interval excludes 0 and enough pairs are in it."""
    assert verdict_word(Estimate("latency_total", n, (low + high) / 2, low, high), sign) == word


def test_comparison_counts_missing_halves_and_unscorable_pairs() -> None:
    """Timed-out, evicted, stopped and duplicate halves and unscorable pairs are all counted."""
    outcomes = [pair(i, 0.12 + (0.02 if i % 2 else -0.02)) for i in range(40)]
    lone = PairHalf("ff", "lone", "production", 0.0)
    outcomes += [PairOutcome("timed_out", "lone", 1.0, production=lone)] * 3
    outcomes += [PairOutcome("duplicate", "p1", 1.0, shadow=outcomes[1].shadow)]
    comparison = compare(outcomes, "24h", 200.0)
    assert comparison.pairs["shadow"] == 40
    assert comparison.unmatched == 3
    assert comparison.missing[("shadow", "duplicate")] == 1
    verdicts = {v.estimate.metric: v for v in comparison.verdicts}
    generate = verdicts["latency_generate"]
    assert generate.word == "worse"
    assert generate.estimate.low < 0.12 < generate.estimate.high  # type: ignore[operator]
    assert verdicts["faithfulness"].word == "no evidence"
    assert verdicts["faithfulness"].unscorable == 40


def test_html_and_markdown_escape_everything_from_the_store() -> None:
    """Intents, ids and stored text are escaped: no markup of the store's reaches the page."""
    outcomes = [pair(i, 0.3, intent=None, query=HOSTILE, answer=HOSTILE) for i in range(MIN_PAIRS)]
    outcomes = [
        PairOutcome(
            o.outcome,
            o.pair_id,
            o.at,
            PairHalf(
                o.both()[0].trace_id,
                o.pair_id,
                "production",
                0.0,
                stages={"generate": 1.0},
                intent=HOSTILE,
                query=HOSTILE,
                answer=HOSTILE,
            ),
            o.shadow,
        )
        for o in outcomes
    ]
    comparison = compare(outcomes, "<1d>", 200.0)
    page = render_html(comparison)
    assert "<script>" not in page
    assert "&lt;script&gt;" in page
    assert "<th>query</th>" in page  # the store kept text: the regressions show it
    markdown = render_markdown(comparison)
    assert "<script>" not in markdown
    assert "\\| **bold**" in markdown  # a cell separator in text cannot split the table


def test_regressions_show_trace_ids_only_when_no_text_was_stored() -> None:
    """Without stored text the largest regressions carry ids, never text columns."""
    comparison = compare([pair(i, 0.3) for i in range(MIN_PAIRS)], "24h", 200.0)
    page = render_html(comparison)
    assert "0000b" in page
    assert "<th>query</th>" not in page


def test_report_from_the_store_says_no_evidence_and_shows_missing_pairs(tmp_path: Path) -> None:
    """A store with only unmatched halves: every verdict is no evidence, the gaps are counted."""
    store = PairStore(tmp_path)
    lone = PairHalf("ab", "p1", "shadow", 0.0)
    assert store.add(PairOutcome("timed_out", "p1", 1000.0, shadow=lone))
    assert not store.add(PairOutcome("timed_out", "p1", 1000.0, shadow=lone))  # idempotent
    comparison = write_report(store, "1h", tmp_path / "r.md", now=1000.0 + 60)
    text = (tmp_path / "r.md").read_text()
    assert comparison.unmatched == 1
    assert "No joined pair." in text
    assert "| shadow | timed_out | 1 |" in text
    old = write_report(store, "30s", tmp_path / "old.html", now=1000.0 + 60)
    assert old.unmatched == 0  # outside --since
    store.close()


def test_report_shadow_without_a_store_exits_1_and_creates_none(tmp_path: Path) -> None:
    """`report shadow` on a state directory without a pair store says so, exits 1, and
    leaves no store behind."""
    config = tmp_path / "monitor.yaml"
    config.write_text(f"service: {{state_dir: {tmp_path / 'state'}}}\n")
    command = [sys.executable, "-m", "monitor", "report", "shadow", "--config", str(config)]
    result = subprocess.run(
        [*command, "--out", str(tmp_path / "r.html")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=tmp_path,
    )
    assert result.returncode == 1
    assert "no pair store" in result.stderr
    assert not (tmp_path / "state" / "shadow.sqlite3").exists()
