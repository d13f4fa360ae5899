"""What reviews feed: judge calibration, implicit-signal associations, the golden-set
export and ``rag-monitor report review``, on the fixed set of 40 reviewed items."""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats.contingency import odds_ratio

from detectors.filter_exclusion.scoring import load_golden_set
from detectors.review.calibration import (
    best_threshold,
    judge_calibration,
    signal_associations,
)
from detectors.review.commands import EXPORT_GOLDEN, REPORT_REVIEW
from detectors.review.model import ReviewContext, ReviewItem, Verdict
from detectors.review.report import build_report, export_golden, write_golden, write_report
from detectors.review.store import ReviewStore
from tests.conftest import make_config

DATA = Path(__file__).resolve().parents[3] / "testdata" / "review_40.json"
S, U = "supported", "unsupported"
# Production text of the fixed set: none of it may reach a report.
MARKERS = ("QUERY-MARKER", "ANSWER-MARKER", "CONTEXT-MARKER", "NOTE-MARKER", "<script", "alert(")


def _item(raw: dict[str, Any]) -> ReviewItem:
    contexts = tuple(ReviewContext(**c) for c in raw.pop("contexts"))
    strata, feedback = tuple(raw.pop("strata")), tuple(raw.pop("feedback"))
    return ReviewItem(**raw, contexts=contexts, strata=strata, feedback=feedback)


def _verdict(raw: dict[str, Any]) -> Verdict:
    relevant, missing = tuple(raw.pop("relevant_doc_ids")), tuple(raw.pop("missing_doc_ids"))
    return Verdict(**raw, relevant_doc_ids=relevant, missing_doc_ids=missing)


def reviewed_40() -> list[tuple[ReviewItem, Verdict]]:
    pairs = json.loads(DATA.read_text(encoding="utf-8"))
    return [(_item(p["item"]), _verdict(p["verdict"])) for p in pairs]


def test_the_fixed_set_is_what_the_hand_computation_reads() -> None:
    """40 items: 36 scored at threshold 0.5, of which 3 no_claim; 4 unscored."""
    reviewed = reviewed_40()
    assert len(reviewed) == 40
    scored = [(i, v) for i, v in reviewed if i.hhem_score is not None]
    assert len(scored) == 36
    assert {i.hhem_threshold for i, _ in scored} == {0.5}
    assert sum(v.supported == "no_claim" for _, v in scored) == 3


def test_confusion_matrix_precision_and_recall_equal_the_hand_count() -> None:
    """Matrix, precision and recall of 'unsupported' equal counts read off the fixed set."""
    # By hand, 33 scored pairs (threshold 0.5; partly counts as unsupported):
    #   HHEM unsupported (< 0.5): human no/partly at .05 .10 .15 .20 .25 .30 .33 .36p .38p .40p
    #                              = 10; human yes at .42 .46 .48 = 3
    #   HHEM supported (>= 0.5):  human no/partly at .52p .58p .61 .72 = 4; human yes = 16
    #   left out: no_claim at .30 .60 .90 = 3; unscored = 4; partly in the matrix: 5
    judge = judge_calibration(reviewed_40())
    assert judge.matrix == {(U, U): 10, (U, S): 3, (S, U): 4, (S, S): 16}
    assert (judge.n, judge.no_claim, judge.unscored, judge.partly) == (33, 3, 4, 5)
    assert judge.thresholds == (0.5,)
    assert judge.precision == pytest.approx(10 / (10 + 3))
    assert judge.recall == pytest.approx(10 / (10 + 4))
    assert judge.agreement == pytest.approx((10 + 16) / 33)


def test_best_threshold_equals_the_hand_scan() -> None:
    """The best observed threshold is 0.42 with 29 of 33 agreeing, as scanned by hand."""
    # By hand: at t = 0.42 the 10 human-unsupported scores below 0.42 agree, and the 19
    # human-supported scores >= 0.42 (.42 .46 .48 and the 16 above 0.5) agree: 29.
    # Neighbours: t = .40 -> 9 + 19 = 28; t = .46 -> 10 + 18 = 28; t = .55 -> 11 + 16 = 27.
    judge = judge_calibration(reviewed_40())
    assert judge.best is not None
    assert judge.best.threshold == 0.42
    assert judge.best.agreement == pytest.approx(29 / 33)
    assert (judge.best.n, judge.best.resamples) == (33, 1000)
    # The same by brute force over every observed score.
    pairs = [
        (i.hhem_score, v.supported == "yes")
        for i, v in reviewed_40()
        if i.hhem_score is not None and v.supported != "no_claim"
    ]
    agreed = {t: sum((s >= t) == h for s, h in pairs) for t, _ in pairs}
    assert max(agreed.values()) == 29
    assert [t for t, a in agreed.items() if a == 29] == [0.42]


def test_bootstrap_interval_is_seeded_and_holds_the_estimate() -> None:
    """The percentile interval repeats with the seed and contains the best threshold."""
    first = judge_calibration(reviewed_40()).best
    again = judge_calibration(reviewed_40()).best
    assert first is not None
    assert first == again
    assert 0.05 <= first.low <= first.threshold <= first.high <= 0.96
    assert first.low < first.high


@pytest.mark.parametrize(
    ("scores", "human", "expected"),
    [
        ([0.2, 0.4, 0.6, 0.8], [False, True, False, True], (0.4, 3)),  # tie with 0.8
        ([0.1, 0.1, 0.9], [False, True, True], (0.1, 2)),  # tied scores: one candidate
        ([0.3, 0.7], [False, True], (0.7, 2)),
        ([0.5], [False], (0.5, 0)),
    ],
    ids=["tie-smallest", "tied-scores", "separable", "one-unsupported"],
)
def test_best_threshold_small_cases(
    scores: list[float], human: list[bool], expected: tuple[float, int]
) -> None:
    """The scan counts agreement per observed score and keeps the smallest on a tie."""
    assert best_threshold(np.array(scores), np.array(human)) == expected


# Tables read off the fixed set: ((present & flagged, present & fine),
# (absent & flagged, absent & fine)); 18 flagged (no, partly or incomplete), 22 fine.
HAND_TABLES = {
    "click": ((2, 3), (16, 19)),
    "copy": ((2, 6), (16, 16)),
    "follow_up": ((3, 1), (15, 21)),
    "regenerate": ((6, 2), (12, 20)),
    "thumbs_down": ((5, 0), (13, 22)),
    "thumbs_up": ((1, 7), (17, 15)),
}
HAND_ODDS = {  # a*d / (b*c)
    "click": 2 * 19 / (3 * 16),
    "copy": 2 * 16 / (6 * 16),
    "follow_up": 3 * 21 / (1 * 15),
    "regenerate": 6 * 20 / (2 * 12),
    "thumbs_up": 1 * 15 / (7 * 17),
}


def test_association_tables_equal_the_hand_count_and_scipy() -> None:
    """Each signal's 2x2 table is the hand count; odds ratio and interval are scipy's."""
    found = {a.kind: a for a in signal_associations(reviewed_40())}
    assert {k: a.table for k, a in found.items()} == HAND_TABLES
    for kind, odds in HAND_ODDS.items():
        association = found[kind]
        assert association.n == 40
        assert association.odds_ratio == pytest.approx(odds)
        expected = odds_ratio([list(row) for row in HAND_TABLES[kind]], kind="sample")
        interval = expected.confidence_interval(confidence_level=0.95)
        assert association.odds_ratio == pytest.approx(expected.statistic)
        assert (association.low, association.high) == pytest.approx((interval.low, interval.high))
        assert association.low is not None
        assert association.low < odds < interval.high


def test_a_zero_cell_is_reported_as_such() -> None:
    """thumbs_down never comes with a fine answer: no odds ratio, no interval, not inf."""
    thumbs_down = {a.kind: a for a in signal_associations(reviewed_40())}["thumbs_down"]
    assert thumbs_down.zero_cell
    assert (thumbs_down.odds_ratio, thumbs_down.low, thumbs_down.high) == (None, None, None)


def test_golden_export_round_trips_through_the_filter_exclusion_reader(tmp_path: Path) -> None:
    """32 probes with relevant + missing ids load through load_golden_set; 8 without gold."""
    reviewed = reviewed_40()
    out = tmp_path / "golden.jsonl"
    export = write_golden(reviewed, out)
    # Items 4, 9, ..., 39 (every fifth) name no gold document.
    assert (export.written, export.without_gold, export.invalid) == (32, 8, 0)
    expected = {
        i.trace_id: frozenset(v.relevant_doc_ids + v.missing_doc_ids)
        for i, v in reviewed
        if v.relevant_doc_ids or v.missing_doc_ids
    }
    assert load_golden_set(out) == expected
    assert expected["00000000000000000000000000000001"] == {"doc-0-a", "missing-0"}
    first = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
    assert first["query"] == reviewed[0][0].query
    assert (first["tenant"], first["reviewed_at"]) == ("acme", "2023-11-14T23:13:20Z")


def test_a_document_id_the_reader_refuses_is_left_out_and_counted(tmp_path: Path) -> None:
    """A 300-character missing id would fail the whole golden set: that item is left out."""
    reviewed = reviewed_40()
    item, verdict = reviewed[0]
    reviewed[0] = (item, replace(verdict, missing_doc_ids=("x" * 300,)))
    out = tmp_path / "golden.jsonl"
    assert write_golden(reviewed, out).invalid == 1
    assert len(load_golden_set(out)) == 31


@pytest.mark.parametrize("suffix", [".html", ".md"])
def test_report_shows_statistics_and_no_production_text(tmp_path: Path, suffix: str) -> None:
    """The report holds the figures, escapes what it shows and holds no query or answer."""
    reviewed = reviewed_40()
    item, verdict = reviewed[1]
    reviewed[1] = (replace(item, feedback=(*item.feedback, "<img src=x>")), verdict)
    out = tmp_path / f"review{suffix}"
    report = write_report(reviewed, out, now=1_700_000_000)
    text = out.read_text(encoding="utf-8")
    assert (report.reviewed, report.golden) == (40, 32)
    for marker in MARKERS:
        assert marker not in text
    assert "<img src=x>" not in text
    assert "&lt;img src=x&gt;" in text
    for figure in ("0.42", "76.9%", "71.4%", "zero cell", "candidate signals"):
        assert figure in text


def _run(words: tuple[str, ...], argv: list[str], state_dir: Path) -> int:
    command = next(c for c in (EXPORT_GOLDEN, REPORT_REVIEW) if c.words == words)
    parser = argparse.ArgumentParser()
    command.arguments(parser)
    config = make_config(service={"state_dir": str(state_dir)})
    return command.run(parser.parse_args(argv), config)


def test_commands_run_end_to_end_on_a_filled_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """export-golden and report review read a real ReviewStore and print what they wrote."""
    state = tmp_path / "state"
    store = ReviewStore(state)
    for item, verdict in reviewed_40():
        assert store.add(replace(item, hhem_score=None, hhem_threshold=None))
        if item.hhem_score is not None and item.hhem_threshold is not None:
            store.attach_score(item.trace_id, item.hhem_score, item.hhem_threshold)
        assert store.record(verdict) is not None
    store.close()

    golden = tmp_path / "golden.jsonl"
    assert _run(("review", "export-golden"), ["--out", str(golden)], state) == 0
    assert len(load_golden_set(golden)) == 32
    report = tmp_path / "review.html"
    assert _run(("report", "review"), ["--out", str(report)], state) == 0
    printed = capsys.readouterr().out
    assert "32 probes; left out: 8" in printed
    assert "40 reviewed; HHEM agreement 78.8% on 33, best threshold 0.42" in printed
    text = report.read_text(encoding="utf-8")
    assert "low_faithfulness" in text  # the queue's per-stratum counts
    for marker in MARKERS:
        assert marker not in text


def test_commands_refuse_a_state_dir_without_a_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No review store: exit 1 with the reason, and no store is created."""
    assert _run(("report", "review"), ["--out", str(tmp_path / "r.html")], tmp_path) == 1
    assert _run(("review", "export-golden"), ["--out", str(tmp_path / "g.jsonl")], tmp_path) == 1
    assert "no review store" in capsys.readouterr().err
    assert not (tmp_path / "review.sqlite3").exists()
    assert not (tmp_path / "r.html").exists()


def test_export_golden_reads_the_store(tmp_path: Path) -> None:
    """export_golden(store, out) returns the number of probes written."""
    store = ReviewStore(tmp_path)
    for item, verdict in reviewed_40()[:10]:
        store.add(item)
        store.record(verdict)
    try:
        assert export_golden(store, tmp_path / "g.jsonl") == 8  # items 4 and 9 have no gold
    finally:
        store.close()
    assert build_report([]).judge.best is None
