"""The review page's session, CSRF and query handling refuse any text a client sends, never
fail on it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from detectors.review.config import ReviewHttpSettings
from detectors.review.model import ReviewContext, ReviewItem
from detectors.review.store import ReviewStore
from detectors.review.web import MAX_QUERY_FIELDS, SESSION_COOKIE, ReviewPage
from monitor.contract.http.wire import Request
from monitor.contract.sidecar_registry import SidecarRegistry

TRACE = "0af7651916cd43dd8448eb211c80319c"
FORM = "application/x-www-form-urlencoded"


@pytest.fixture
def page(tmp_path: Path) -> Iterator[ReviewPage]:
    store = ReviewStore(tmp_path)
    store.add(ReviewItem(TRACE, 1.0, "q", "a", contexts=(ReviewContext("d1"),), strata=("random",)))
    yield ReviewPage(ReviewHttpSettings(port=0), store, "token", lambda *_: None, SidecarRegistry())
    store.close()


def _request(
    method: str, path: str, headers: dict[str, str], body: bytes = b"", query: str = ""
) -> Request:
    return Request(method, path, headers, len(body), keep_alive=True, body=body, query=query)


def test_a_cookie_with_non_ascii_characters_is_refused_401(page: ReviewPage) -> None:
    """A session cookie whose signature holds non-ASCII characters (a header is read as
    Latin-1) is no session: 401, not a failed request."""
    cookie = f"{SESSION_COOKIE}=session.4122c29b\xc9\xc9\xc9"
    response = page.refuse(_request("GET", "/review", {"cookie": cookie}))
    assert response is not None
    assert response.status == 401


def test_a_query_with_too_many_fields_is_ignored_not_failed(page: ReviewPage) -> None:
    """A query over MAX_QUERY_FIELDS fields carries no token (401) and no skip list (the
    page is shown), instead of failing the request."""
    query = "token=token" + "&" * MAX_QUERY_FIELDS
    refused = page.refuse(_request("GET", "/review", {}, query=query))
    assert refused is not None
    assert refused.status == 401
    bearer = _request("GET", "/review", {"authorization": "Bearer token"}, query=query)
    assert page.refuse(bearer) is None
    assert page.handle(bearer).status == 200


def test_a_csrf_field_with_non_ascii_characters_is_refused_403(page: ReviewPage) -> None:
    """A verdict form whose CSRF field holds non-ASCII characters is refused as stale: 403."""
    session = page._set_cookie("s1")["Set-Cookie"].split(";", 1)[0]
    headers = {"cookie": session, "content-type": FORM}
    body = "supported=yes&csrf=\u00e9t\u00e9".encode()
    request = _request("POST", f"/review/{TRACE}", headers, body)
    assert page.refuse(request) is None
    assert page.handle(request).status == 403
