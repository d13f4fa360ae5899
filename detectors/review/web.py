"""The reviewer's web page: ``GET /review`` shows the next unreviewed item, blind;
``POST /review/<trace_id>`` records the verdict and answers 303 to the next one.

It runs on the sidecar's bounded HTTP server (``monitor/contract/http/service.py``), bound to
``detectors.review.http`` (loopback by default). When the sidecar has a bearer token
(``service.auth_token_env``) every request needs it: ``Authorization: Bearer``,
or the session cookie that opening ``/review?token=<token>`` once sets (HttpOnly,
SameSite=Strict, Path=/review; the answer redirects to ``/review`` so the token leaves the
address bar). A form POST from a cookie session must carry the CSRF field bound to that
session. Sessions are signed with a per-process secret: nothing to store, and a restart
signs everyone out. The forms in flight hold ``FORMS_IN_FLIGHT`` x ``max_body_bytes`` at
most (the server's byte budget; beyond, 503 + Retry-After). Refusals count in
``rag_monitor_http_refused_total{server="review"}``, verdicts in
``rag_review_verdicts_total{supported}``. No request text is logged.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
import urllib.parse
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from prometheus_client import Counter

from detectors.review.model import SUPPORTED, ReviewItem, Verdict
from detectors.review.names import VERDICTS_TOTAL
from detectors.review.page import (
    MAX_TRACE_ID_CHARS,
    FormError,
    empty_page,
    error_page,
    item_page,
    parse_skip,
    parse_verdict_form,
    review_url,
    shows_spans,
)
from monitor.contract.http.limits import HttpLimits
from monitor.contract.http.service import HttpService
from monitor.contract.http.wire import Request, Response
from monitor.contract.sidecar_registry import SidecarRegistry

if TYPE_CHECKING:
    from detectors.review.config import ReviewHttpSettings
    from detectors.review.store import ReviewStore

SESSION_COOKIE = "rag_review_session"
FORM = "application/x-www-form-urlencoded"
HTML = "text/html; charset=utf-8"

Access = Literal["bearer", "cookie", "open", "token_link"]

# A page for a few reviewers: this many forms of max_body_bytes in flight at once
# (1 MiB at the default 64 KiB), far below what max_connections of them would hold.
FORMS_IN_FLIGHT = 16
# The page's query parameters (token, skip) with room to spare; a longer query is ignored.
MAX_QUERY_FIELDS = 8


def security_headers(nonce: str | None = None) -> dict[str, str]:
    """Headers on every answer: nothing loads from elsewhere, no framing, no referrer,
    no caching of production text."""
    inline = f"'nonce-{nonce}'" if nonce else "'none'"
    return {
        "Content-Security-Policy": (
            f"default-src 'none'; style-src {inline}; script-src {inline}; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
        ),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
    }


def verdicts_counter(registry: SidecarRegistry) -> Counter:
    """``rag_review_verdicts_total{supported}``, declared when the page starts."""
    return registry.family(
        Counter,
        VERDICTS_TOTAL,
        "Verdicts recorded on the review page, by the reviewer's 'supported' answer.",
        ["supported"],
    )


class ReviewPage(HttpService):
    """The review page on its own port; ``start``, ``stop_intake``, ``shutdown`` and ``port``
    are ``HttpService``'s."""

    def __init__(
        self,
        settings: ReviewHttpSettings,
        store: ReviewStore,
        token: str | None,
        on_verdict: Callable[[ReviewItem, Verdict], None],
        registry: SidecarRegistry,
    ) -> None:
        self.store = store
        self._token = token
        self._on_verdict = on_verdict
        self._secret = secrets.token_bytes(32)
        self._max_body = settings.max_body_bytes
        self._judge_spans = settings.judge_spans
        counter = verdicts_counter(registry)
        self._verdicts = {value: counter.labels(value) for value in SUPPORTED}
        super().__init__(
            "review",
            settings.host,
            settings.port,
            HttpLimits.of(settings),
            registry=registry,
            budget=registry.budget("review", FORMS_IN_FLIGHT * settings.max_body_bytes),
            discard_bytes=settings.max_body_bytes,
        )

    # --- on the loop, with the head only ------------------------------------------------

    def refuse(self, request: Request) -> Response | None:
        route = _route(request.path)
        refusal: tuple[int, str, str, dict[str, str]] | None = None
        if route is None:
            refusal = (404, "not found", "not_found", {})
        elif request.method != ("GET" if route == "page" else "POST"):
            allow = "GET" if route == "page" else "POST"
            refusal = (405, f"only {allow}", "method", {"Allow": allow})
        elif self._access(request) is None:
            refusal = (
                401,
                "missing or wrong token",
                "unauthorized",
                {"WWW-Authenticate": "Bearer"},
            )
        elif (request.content_length or 0) > self._max_body:
            refusal = (413, f"the form is larger than {self._max_body} bytes", "too_large", {})
        if refusal is None:
            return None
        status, message, reason, headers = refusal
        self._count(reason)
        return _text(status, message, headers)

    # --- on a handler thread, with the body ---------------------------------------------

    def handle(self, request: Request) -> Response:
        access = self._access(request)
        if access is None:  # refuse() let it through; answer the same if that ever changes
            self._count("unauthorized")
            return _text(401, "missing or wrong token", {"WWW-Authenticate": "Bearer"})
        if _route(request.path) == "page":
            return self._page(request, access)
        return self._record(request, access)

    def _page(self, request: Request, access: Access) -> Response:
        query = _query(request.query)
        session = self._session(request)
        if access == "token_link" or "token" in query:
            # Trade the token in the address bar for a session cookie.
            new = self._new_session()
            return Response(
                303,
                b"",
                HTML,
                {**security_headers(), "Location": "/review", **self._set_cookie(new)},
            )
        headers: dict[str, str] = {}
        if session is None:  # bearer or open access: a session for the CSRF field
            session = self._new_session()
            headers.update(self._set_cookie(session))
        skip = parse_skip(query.get("skip", [""])[0])
        nonce = secrets.token_urlsafe(16)
        item = self.store.next_unreviewed(skip)
        progress = self.store.progress()
        if item is None:
            html = empty_page(progress, skip=skip, nonce=nonce)
        else:
            html = item_page(
                item,
                progress,
                csrf=self._csrf(session),
                skip=skip,
                nonce=nonce,
                marks=shows_spans(item, self._judge_spans),
            )
        return Response(200, html.encode(), HTML, {**security_headers(nonce), **headers})

    def _record(self, request: Request, access: Access) -> Response:
        trace_id = urllib.parse.unquote(request.path.removeprefix("/review/"))
        if request.headers.get("content-type", "").split(";", 1)[0].strip().lower() != FORM:
            return self._refusal_page(415, f"the verdict must be posted as {FORM}", "bad_form")
        item = self.store.get(trace_id)
        if item is None:
            return self._refusal_page(404, "no such item in the review queue", "not_found")
        try:
            form = parse_verdict_form(request.body, item, time.time())
        except FormError as exc:
            return self._refusal_page(400, str(exc), "bad_form")
        # A bearer token is never sent by a browser on its own, so only cookie sessions
        # (which a browser does attach) need the CSRF field.
        session = self._session(request)
        if access != "bearer" and (session is None or not _matches(form.csrf, self._csrf(session))):
            return self._refusal_page(403, "the form's session field is missing or stale", "csrf")
        recorded = self.store.record(form.verdict)
        if recorded is None:
            return self._refusal_page(404, "no such item in the review queue", "not_found")
        self._verdicts[form.verdict.supported].inc()
        self._on_verdict(recorded, form.verdict)
        return Response(303, b"", HTML, {**security_headers(), "Location": review_url(form.skip)})

    def _refusal_page(self, status: int, message: str, reason: str) -> Response:
        self._count(reason)
        nonce = secrets.token_urlsafe(16)
        body = error_page(message, nonce).encode()
        return Response(status, body, HTML, security_headers(nonce))

    # --- access and sessions ------------------------------------------------------------

    def _access(self, request: Request) -> Access | None:
        """How the request is allowed in, or None when it is not."""
        if self._token is None:
            return "open"
        given = request.headers.get("authorization", "").encode()
        if hmac.compare_digest(given, f"Bearer {self._token}".encode()):
            return "bearer"
        if self._session(request) is not None:
            return "cookie"
        if request.method == "GET" and request.path == "/review":
            offered = _query(request.query).get("token", [""])
            if hmac.compare_digest(offered[0].encode(), self._token.encode()):
                return "token_link"
        return None

    def _session(self, request: Request) -> str | None:
        """The session id of a validly signed session cookie, else None."""
        for part in request.headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name != SESSION_COOKIE:
                continue
            session, _, mac = value.partition(".")
            if session and _matches(mac, self._mac("session", session)):
                return session
        return None

    def _new_session(self) -> str:
        return secrets.token_urlsafe(18)

    def _csrf(self, session: str) -> str:
        return self._mac("csrf", session)

    def _mac(self, purpose: str, session: str) -> str:
        message = f"{purpose}\0{session}".encode()
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()

    def _set_cookie(self, session: str) -> dict[str, str]:
        value = f"{session}.{self._mac('session', session)}"
        attributes = "HttpOnly; SameSite=Strict; Path=/review"
        return {"Set-Cookie": f"{SESSION_COOKIE}={value}; {attributes}"}


def _query(raw: str) -> dict[str, list[str]]:
    """The query string's parameters; none when it has more than ``MAX_QUERY_FIELDS``
    fields (``parse_qs`` raises on them), as ``parse_skip`` drops malformed ids."""
    try:
        return urllib.parse.parse_qs(raw, max_num_fields=MAX_QUERY_FIELDS)
    except ValueError:
        return {}


def _matches(given: str, expected: str) -> bool:
    """Compared in constant time as bytes: ``compare_digest`` raises on a ``str`` that is not
    ASCII, and a cookie or form field can hold any character."""
    return hmac.compare_digest(given.encode(), expected.encode())


def _route(path: str) -> Literal["page", "verdict"] | None:
    if path == "/review":
        return "page"
    rest = path.removeprefix("/review/")
    if rest != path and 0 < len(rest) <= 3 * MAX_TRACE_ID_CHARS and "/" not in rest:
        return "verdict"
    return None


def _text(status: int, message: str, headers: dict[str, str]) -> Response:
    return Response(
        status, f"{message}\n".encode(), "text/plain", {**security_headers(), **headers}
    )
