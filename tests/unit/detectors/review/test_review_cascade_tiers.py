"""The review report's cascade sections: each tier of a judge cascade against reviewers,
inside and outside the uncertain band, and the first judge's agreement by its score, from
reviewed items carrying their tiers; the tiers survive the store; without a cascade the
report has no such section."""

from __future__ import annotations

from pathlib import Path

import pytest

from detectors.review.cascade import (
    FIRST_TIER,
    SECOND_TIER,
    first_score_bins,
    tier_agreements,
)
from detectors.review.model import ReviewItem, Supported, Verdict
from detectors.review.report import build_report, render_html, render_markdown
from detectors.review.store import ReviewStore
from monitor.contract.trace import TierVerdict

CASCADE = "cascade/hhem/HHEM-2.1-Open@abc/t0.5+llm/judge-model/p1234/t0.5/b0.3-0.7"
HHEM = "hhem/HHEM-2.1-Open@abc/t0.5"
LLM = "llm/judge-model/p1234/t0.5"
THRESHOLD = 0.5

# (first score, second score or None (not sent, or refused), human verdict). In the band
# [0.3, 0.7] the first judge is wrong three times of four and the LLM right each time;
# outside it the first judge is right but once.
ITEMS: list[tuple[float, float | None, Supported]] = [
    (0.35, 0.0, "no"),  # first: unsupported (right); second: right
    (0.45, 1.0, "yes"),  # first wrong, second right
    (0.55, 0.0, "no"),  # first wrong, second right
    (0.65, 0.25, "partly"),  # first wrong (partly is unsupported), second right
    (0.62, None, "yes"),  # in band, refused by the budget: the first tier alone, right
    (0.05, None, "no"),  # outside: first right
    (0.15, None, "yes"),  # outside: first wrong
    (0.92, None, "yes"),  # outside: first right
    (0.95, None, "no_claim"),  # left out: nothing to support
]


def item(index: int, first: float, second: float | None) -> ReviewItem:
    in_band = 0.3 <= first <= 0.7
    tiers = [TierVerdict(HHEM, first, in_band)]
    if second is not None:
        tiers.append(TierVerdict(LLM, second, False))
    final = second if second is not None else first
    return ReviewItem(
        trace_id=f"t{index}",
        time=0.0,
        query="q",
        answer="a",
        hhem_score=final,
        hhem_threshold=THRESHOLD,
        judge=CASCADE,
        tiers=tuple(tiers),
    )


def reviewed() -> list[tuple[ReviewItem, Verdict]]:
    return [
        (item(i, first, second), Verdict(f"t{i}", human))
        for i, (first, second, human) in enumerate(ITEMS)
    ]


def test_each_tier_is_read_against_reviewers_inside_and_outside_the_band() -> None:
    """First tier in the band: 2 of 5 right (the refused item counts for the first tier);
    outside: 2 of 3; second tier (in the band only): 4 of 4. 'partly' is unsupported and
    'no claim' is left out."""
    first_in, first_out, second_in = tier_agreements(reviewed())
    s, u = "supported", "unsupported"
    assert (first_in.tier, first_in.judge, first_in.in_band) == (FIRST_TIER, HHEM, True)
    assert first_in.matrix == {(u, u): 1, (u, s): 1, (s, u): 2, (s, s): 1}
    assert first_in.n == 5
    assert first_in.agreement == pytest.approx(2 / 5)
    assert (first_out.in_band, first_out.n, first_out.agreement) == (False, 3, 2 / 3)
    assert (second_in.tier, second_in.judge, second_in.in_band) == (SECOND_TIER, LLM, True)
    assert (second_in.n, second_in.agreement, second_in.recall) == (4, 1.0, 1.0)
    assert {t.cascade for t in (first_in, first_out, second_in)} == {CASCADE}


def test_the_first_judges_agreement_by_score_shows_where_the_band_pays() -> None:
    """Bins of a tenth: in [0.6, 0.7) the first judge agrees once of two, the second on the
    one it judged; bins without a reviewed item (or only 'no claim') are left out."""
    bins = {(b.low, b.high): b for b in first_score_bins(reviewed())}
    assert sorted(bins) == [
        (0.0, 0.1), (0.1, 0.2), (0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (0.6, 0.7), (0.9, 1.0),
    ]  # fmt: skip
    six = bins[0.6, 0.7]
    assert (six.n, six.first_agreed, six.escalated, six.second_n, six.second_agreed) == (
        2, 1, 2, 1, 1,
    )  # fmt: skip
    assert (six.first_agreement, six.second_agreement) == (0.5, 1.0)
    low = bins[0.1, 0.2]
    assert (low.n, low.first_agreement, low.escalated, low.second_agreement) == (1, 0.0, 0, None)
    assert bins[0.9, 1.0].n == 1  # the 'no claim' item left out


def test_the_report_shows_the_cascade_sections_only_with_a_cascade() -> None:
    """With tiers: both cascade tables, their rows, the note on setting the band, in HTML
    and Markdown; reviewed items of a single judge: no cascade section."""
    report = build_report(reviewed(), now=0.0)
    markdown, page = render_markdown(report), render_html(report)
    title = "Cascade: the first judge's agreement by its score"
    for text, heading in ((markdown, title), (page, title.replace("'", "&#x27;"))):
        assert "Cascade tiers against reviewers" in text
        assert heading in text
        assert "Set the band from this table" in text
    assert f"| {CASCADE} | second | {LLM} | in band | 4 | 100.0% |" in markdown
    assert f"| {CASCADE} | first | {HHEM} | outside band | 3 | 66.7% |" in markdown
    assert f"| {CASCADE} | [0.6, 0.7) | 2 | 50.0% | 2 | 1 | 100.0% |" in markdown
    plain = [
        (ReviewItem("p", 0.0, "q", "a", hhem_score=0.9, hhem_threshold=0.5), Verdict("p", "yes"))
    ]
    assert "Cascade" not in render_markdown(build_report(plain, now=0.0))


def test_the_store_keeps_each_tier_with_the_score(tmp_path: Path) -> None:
    """Tiers attached with the score come back from the store, and the report reads them."""
    store = ReviewStore(tmp_path)
    try:
        store.add(ReviewItem("t1", 0.0, "q", "a"))
        tiers = (TierVerdict(HHEM, 0.45, True), TierVerdict(LLM, 0.0, False))
        store.attach_score("t1", 0.0, THRESHOLD, CASCADE, tiers=tiers)
        store.record(Verdict("t1", "no"))
        [(held, _)] = store.reviewed()
    finally:
        store.close()
    assert held.tiers == tiers
    [first, second] = tier_agreements([(held, Verdict("t1", "no"))])
    assert (first.agreement, second.agreement) == (1.0, 1.0)
