"""The reviewer's page on a real ReviewStore: tokens, sessions and CSRF over real sockets,
escaping of hostile production text, and five items reviewed with the keyboard alone in
headless Chromium (Debian's chromium + chromium-driver, driven by selenium). The browser
test writes the docs site's screenshots to docs/pages/images/review-*.png."""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from http.client import HTTPResponse
from pathlib import Path
from typing import Any

import pytest

from detectors.filter_exclusion.scoring import load_golden_set
from detectors.review.calibration import DEFAULT_JUDGE
from detectors.review.config import ReviewConfig, ReviewHttpSettings
from detectors.review.detector import ReviewDetector
from detectors.review.estimates import faithfulness_row, pass_shares, random_pairs
from detectors.review.model import ReviewContext, ReviewItem, Verdict
from detectors.review.report import export_golden
from detectors.review.store import ReviewStore
from detectors.review.web import ReviewPage
from monitor.contract.rulekit.prediction_powered import ReviewedPairs
from monitor.contract.sidecar_registry import SidecarRegistry
from tests.integration.conftest import headless_chromium

pytestmark = pytest.mark.integration

TOKEN = "review-test-token-3f9c"  # noqa: S105 - a test secret
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "pages" / "images"
HOSTILE_QUERY = "<script>window.__pwned = 1</script>what is the refund window?"
HOSTILE_ANSWER = '"><img src=x onerror="window.__pwned = 2">Thirty days.'
HOSTILE_DOC = '"><b id="injected">doc</b>'
HOSTILE_NOTE = '<script>alert("note")</script>"><img src=x onerror=alert(1)>'
# A token-level judge's spans on the hostile answer: the markup-looking part, and "Thirty".
THIRTY = HOSTILE_ANSWER.index("Thirty")
HOSTILE_SPANS = ((0, THIRTY), (THIRTY, THIRTY + len("Thirty")))


def _items() -> list[ReviewItem]:
    plain = [
        ("How long is the warranty on the X200?", "Two years from delivery.", "warranty"),
        ("Can I return opened software?", "No, opened software is final sale.", "returns"),
        ("Which regions ship for free?", "EU and UK orders over 50 EUR.", "shipping"),
        ("How do I reset my password?", "Use 'Forgot password' on the login page.", "account"),
        ("Is there a student discount?", "Yes, 10% with a valid student id.", "pricing"),
    ]
    items = [
        ReviewItem(
            trace_id=f"trace-{i}",
            time=1_700_000_000.0 + i,
            query=query,
            answer=answer,
            contexts=(
                ReviewContext(f"{topic}-policy", "c1", f"The {topic} policy says: {answer}"),
                ReviewContext(f"{topic}-faq", "c7", f"Frequently asked about {topic}."),
            ),
            tenant="acme",
            strata=("random",) if i % 2 else ("random", "thumbs_down"),
            hhem_score=0.4321,
            hhem_threshold=0.5,
            feedback=("regenerate",),
            evaluations=(("groundedness", "fail"),),
            queued_at=1_700_000_100.0 + i,
        )
        for i, (query, answer, topic) in enumerate(plain)
    ]
    # a random-stratum item with spans: its reviewer stays blind to them (judge_spans)
    items[0] = replace(items[0], spans=((0, 3),))
    hostile = ReviewItem(
        trace_id="trace-hostile",
        time=1_700_000_000.5,
        query=HOSTILE_QUERY,
        answer=HOSTILE_ANSWER,
        contexts=(
            ReviewContext(HOSTILE_DOC, "<i>c</i>", "<script>window.__pwned = 3</script>ctx"),
            ReviewContext("refunds", None, "Refunds within 30 days."),
        ),
        strata=("low_faithfulness",),
        hhem_score=0.1234,
        hhem_threshold=0.5,
        evaluations=(("groundedness", "fail"),),
        spans=HOSTILE_SPANS,
        queued_at=1_700_000_100.5,  # second in the queue
    )
    return [items[0], hostile, *items[1:]]


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ReviewStore]:
    held = ReviewStore(tmp_path / "state")
    for item in _items():
        assert held.add(item)
    yield held
    held.close()


class Page:
    """A started ReviewPage with what it reported, each verdict also handed to a review
    detector (as the sidecar does) for its agreement counters."""

    def __init__(self, store: ReviewStore, token: str | None) -> None:
        self.registry = SidecarRegistry()
        self.seen: list[tuple[ReviewItem, Verdict]] = []
        self.detector = ReviewDetector(
            ReviewConfig.model_validate({"enabled": True, "http": {"enabled": False}}),
            self.registry,
            store.path.parent,
        )

        def on_verdict(item: ReviewItem, verdict: Verdict) -> None:
            self.seen.append((item, verdict))
            self.detector.on_verdict(item, verdict)

        self.page = ReviewPage(ReviewHttpSettings(port=0), store, token, on_verdict, self.registry)
        self.page.start()
        self.base = f"http://127.0.0.1:{self.page.port}"

    def refused(self, reason: str) -> float:
        labels = {"server": "review", "reason": reason}
        return self.registry.get_sample_value("rag_monitor_http_refused_total", labels) or 0.0

    def verdicts(self, supported: str) -> float:
        labels = {"supported": supported}
        return self.registry.get_sample_value("rag_review_verdicts_total", labels) or 0.0


@pytest.fixture
def page(store: ReviewStore) -> Iterator[Page]:
    started = Page(store, TOKEN)
    yield started
    started.page.stop_intake(2.0)
    started.page.shutdown()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


_OPENER = urllib.request.build_opener(_NoRedirect)


def call(
    url: str, *, data: dict[str, Any] | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    """Status, headers and text of one request, redirects not followed."""
    body = None if data is None else urllib.parse.urlencode(data, doseq=True).encode()
    request = urllib.request.Request(url, data=body, headers=headers or {})
    if body is not None:
        request.add_header("Content-Type", "application/x-www-form-urlencoded")
    try:
        response: HTTPResponse = _OPENER.open(request, timeout=10)
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers.items()), error.read().decode()
    with response:
        return response.status, dict(response.headers.items()), response.read().decode()


def bearer() -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}"}


def test_without_the_token_the_page_and_posts_are_refused(page: Page, store: ReviewStore) -> None:
    """No token, a wrong token, a wrong link token or a forged cookie: 401, counted, nothing
    recorded and no production text in the answer."""
    verdict = {"supported": "yes", "csrf": "x"}
    answers = [
        call(f"{page.base}/review"),
        call(f"{page.base}/review", headers={"Authorization": "Bearer wrong"}),
        call(f"{page.base}/review?token=wrong"),
        call(f"{page.base}/review", headers={"Cookie": "rag_review_session=abc.def"}),
        call(f"{page.base}/review/trace-0", data=verdict),
        call(f"{page.base}/review/trace-0?token={TOKEN}", data=verdict),
    ]
    assert [status for status, _, _ in answers] == [401] * 6
    assert all("warranty" not in text for _, _, text in answers)
    assert page.refused("unauthorized") == 6
    assert store.reviewed() == []


def test_token_link_trades_the_token_for_a_session_cookie(page: Page) -> None:
    """/review?token= answers 303 to /review with an HttpOnly, SameSite=Strict cookie that
    then opens the page."""
    status, headers, _ = call(f"{page.base}/review?token={TOKEN}")
    assert (status, headers["Location"]) == (303, "/review")
    cookie = headers["Set-Cookie"]
    assert {"HttpOnly", "SameSite=Strict", "Path=/review"} <= {
        part.strip() for part in cookie.split(";")
    }
    status, headers, text = call(f"{page.base}/review", headers={"Cookie": cookie.split(";")[0]})
    assert status == 200
    assert "How long is the warranty on the X200?" in text


def test_page_is_blind_escaped_and_locked_down(page: Page, store: ReviewStore) -> None:
    """The item page never shows score, strata of the item, feedback or evaluation results;
    hostile text comes back escaped; the security headers are on it."""
    status, headers, text = call(f"{page.base}/review?skip=trace-0", headers=bearer())
    assert status == 200
    csp = headers["Content-Security-Policy"]
    for directive in ("default-src 'none'", "form-action 'self'", "frame-ancestors 'none'"):
        assert directive in csp
    assert "script-src 'nonce-" in csp
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert "0.1234" not in text
    assert "regenerate" not in text
    assert "groundedness" not in text
    assert "<script>window.__pwned" not in text
    assert '"><img' not in text
    assert '<b id="injected">' not in text
    assert "&lt;script&gt;window.__pwned = 1&lt;/script&gt;" in text
    assert "&quot;&gt;&lt;img src=x onerror=&quot;window.__pwned = 2&quot;&gt;" in text
    # the judge's spans are marks around escaped text: the marks are the only markup
    assert (
        '<mark class="unsupported">&quot;&gt;&lt;img src=x onerror=&quot;window.__pwned = 2'
        '&quot;&gt;</mark><mark class="unsupported">Thirty</mark> days.' in text
    )
    assert text.count("<script") == 1  # only the page's own, with the nonce


def test_post_needs_the_session_csrf_field(page: Page, store: ReviewStore) -> None:
    """A cookie session must post its own CSRF field; bearer clients need none; bad forms
    get 400 and leave the store alone."""
    _, headers, _ = call(f"{page.base}/review?token={TOKEN}")
    cookie = {"Cookie": headers["Set-Cookie"].split(";")[0]}
    status, _, _ = call(f"{page.base}/review/trace-0", data={"supported": "yes"}, headers=cookie)
    assert status == 403
    status, _, _ = call(
        f"{page.base}/review/trace-0", data={"supported": "yes", "csrf": "0" * 64}, headers=cookie
    )
    assert status == 403
    bad_forms = [
        {"supported": "maybe"},
        {"supported": "yes", "relevant": "not-a-context-of-this-item"},
        {"supported": "yes", "missing": " ".join(f"d{i}" for i in range(21))},
        {"supported": "yes", "reason": "boring"},
        {"supported": "yes", "note": "x" * 2001},
    ]
    for form in bad_forms:
        status, _, _text = call(f"{page.base}/review/trace-0", data=form, headers=bearer())
        assert status == 400, form
    assert page.refused("csrf") == 2
    assert page.refused("bad_form") == len(bad_forms)
    assert store.reviewed() == []
    form = {
        "supported": "no",
        "relevant": "warranty-faq",
        "missing": "a, b c",
        "note": HOSTILE_NOTE,
    }
    status, headers, _ = call(f"{page.base}/review/trace-0", data=form, headers=bearer())
    assert (status, headers["Location"]) == (303, "/review")
    [(item, verdict)] = store.reviewed()
    assert (verdict.supported, verdict.relevant_doc_ids) == ("no", ("warranty-faq",))
    assert (verdict.missing_doc_ids, verdict.note) == (("a", "b", "c"), HOSTILE_NOTE)
    assert page.seen == [(item, verdict)]
    assert page.verdicts("no") == 1


def test_review_five_items_with_the_keyboard(
    page: Page, store: ReviewStore, tmp_path: Path
) -> None:
    """Headless Chromium: open the page with the token, review five items and skip one with
    single keys, no hostile text runs; the verdicts reach the store, the golden set, the
    agreement counters by stratum and the corrected pass share."""
    # the judge (items without a judge name: HHEM) passed 40% of what it scored
    judged = {faithfulness_row(DEFAULT_JUDGE): (1000.0, 400.0)}
    [before] = pass_shares(random_pairs(store.reviewed(), since=0.0), judged)
    assert before.corrected is None  # no review yet: nothing to correct with
    with headless_chromium(1000, 1000) as browser:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        _review_with_keys(browser, page, By, WebDriverWait)
    reviewed = {item.trace_id: verdict for item, verdict in store.reviewed()}
    assert sorted(reviewed) == ["trace-0", "trace-1", "trace-2", "trace-4", "trace-hostile"]
    assert store.get("trace-3") is not None
    assert store.verdict("trace-3") is None
    hostile = reviewed["trace-hostile"]
    assert hostile.supported == "no"
    assert hostile.reason == "wrong"
    assert hostile.relevant_doc_ids == (HOSTILE_DOC, "refunds")
    assert hostile.missing_doc_ids == ("refund-policy-2024", "terms")
    assert hostile.note == HOSTILE_NOTE
    assert reviewed["trace-0"].relevant_doc_ids == ("warranty-policy",)
    assert reviewed["trace-1"].relevant_doc_ids == ("returns-faq",)
    assert reviewed["trace-4"].relevant_doc_ids == ("pricing-policy",)
    assert [reviewed[t].supported for t in ("trace-0", "trace-1", "trace-2", "trace-4")] == [
        "yes",
        "partly",
        "no_claim",
        "yes",
    ]
    assert reviewed["trace-1"].reason == "incomplete"
    assert (page.verdicts("yes"), page.verdicts("no"), page.verdicts("partly")) == (2, 1, 1)
    assert len(page.seen) == 5
    # The verdicts recorded on the page move the corrected estimate: three of the random
    # stratum's items judged by people (the no_claim one is left out), two supported, all
    # failed by the judge; the hostile item was only oversampled (low_faithfulness).
    after, groundedness = pass_shares(random_pairs(store.reviewed(), since=0.0), judged)
    assert after.pairs == ReviewedPairs(judge_fail_human_pass=2, both_fail=1)
    assert groundedness.pairs == after.pairs  # its fail on every item, against the same verdicts
    assert after.corrected is not None
    assert after.corrected.share == pytest.approx(2 / 3)  # the judge told people nothing
    agreement = "rag_review_judge_agreement_total"
    counted = {
        (s.labels["stratum"], s.labels["human"]): s.value
        for family in page.registry.collect()
        for s in family.samples
        if s.name == agreement and s.value
    }
    assert counted == {
        ("random", "yes"): 2,
        ("random", "partly"): 1,
        ("random", "no_claim"): 1,
        ("other", "no"): 1,
    }
    out = tmp_path / "golden.jsonl"
    assert export_golden(store, out) == 5
    golden = load_golden_set(out)  # the false-exclusion detector's own reader
    assert golden == {
        trace_id: frozenset(verdict.relevant_doc_ids + verdict.missing_doc_ids)
        for trace_id, verdict in reviewed.items()
    }


def _review_with_keys(browser: Any, page: Page, by: Any, wait: Any) -> None:
    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    browser.get(f"{page.base}/review?token={TOKEN}")
    assert browser.current_url == f"{page.base}/review"  # the token left the address bar
    assert "rag_review_session" not in browser.execute_script("return document.cookie")

    def keys(*sequence: str) -> None:
        form = browser.find_element(by.ID, "verdict")
        chain = ActionChains(browser)
        for key in sequence:
            chain.send_keys(key)
        chain.perform()
        if sequence[-1] in (Keys.ENTER, "s"):  # wait for the next page
            wait(browser, 10).until(lambda b: _stale(form))

    def query() -> str:
        return str(browser.find_element(by.ID, "query").text)

    assert query() == "How long is the warranty on the X200?"
    assert browser.find_elements(by.CSS_SELECTOR, "mark") == []  # random stratum: blind
    keys("y", "1")
    assert browser.find_element(by.ID, "ctx1").is_selected()
    IMAGES.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(IMAGES / "review-item.png"))
    keys(Keys.ENTER)
    assert query() == HOSTILE_QUERY  # shown as text, not run
    assert browser.find_elements(by.ID, "injected") == []
    assert browser.find_elements(by.CSS_SELECTOR, "img") == []
    marks = browser.find_elements(by.CSS_SELECTOR, "#answer mark.unsupported")
    assert [mark.text for mark in marks] == [HOSTILE_ANSWER[:THIRTY], "Thirty"]
    assert browser.find_element(by.ID, "answer").text == HOSTILE_ANSWER  # whole, as text
    browser.save_screenshot(str(IMAGES / "review-marks.png"))
    keys("n", "w", "1", "2", "m")
    keys("refund-policy-2024, terms", Keys.ESCAPE, "e", HOSTILE_NOTE, Keys.ESCAPE, Keys.ENTER)
    assert query() == "Can I return opened software?"
    keys("p", "i", "2", Keys.ENTER)
    keys("c", "1", Keys.ENTER)
    assert query() == "How do I reset my password?"
    keys("s")  # skip trace-3
    assert query() == "Is there a student discount?"
    keys("y", "2", "2", "1", Keys.ENTER)  # 2 toggled twice: off again
    assert browser.find_element(by.ID, "done").text == "Nothing left to review."
    progress = browser.find_element(by.ID, "progress").text
    assert "random: 4 / 5" in progress
    assert "low_faithfulness: 1 / 1" in progress
    assert "thumbs_down: 3 / 3" in progress
    assert browser.execute_script("return window.__pwned") is None
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018 - reading it raises when there is none
    browser.set_window_size(1000, 400)  # the progress fits: a small PNG
    browser.save_screenshot(str(IMAGES / "review-progress.png"))


def _stale(element: Any) -> bool:
    from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as error:
        # Chromium sometimes reports a node of the replaced page this way instead.
        if "does not belong to the document" in str(error.msg):
            return True
        raise
    return False
