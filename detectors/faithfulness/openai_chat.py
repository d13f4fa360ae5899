"""One chat completions request to an OpenAI-compatible API, with structured output.

The request asks for a JSON object that follows a schema
(``response_format: {"type": "json_schema", "json_schema": {..., "strict": true}}``,
what OpenAI, vLLM, Ollama and most gateways accept) at temperature 0, over the standard
library's HTTP client: no SDK to install. With ``max_tokens`` set (a cascade always sets
it: its budget bounds each reply) the request carries it. The reply is read strictly: a
status other than 200 is an error of its kind; a body that is not the chat completion
shape, a cut reply (``finish_reason`` other than ``stop``), a refusal, content that is
not a JSON object, or an object the caller's ``parse`` refuses (``ValueError``: off its
schema) is ``malformed``.

Retries: a 429, a 408, a 5xx, a timeout or a lost connection is retried up to
``max_retries`` times, after the server's ``Retry-After`` (seconds or an HTTP date) or an
exponential backoff with jitter; a wait over ``MAX_RETRY_WAIT_S`` is not taken. Other
4xx and malformed replies are not retried: the same request would fail the same way.
Every attempt is reported with its outcome and token usage, so tokens spent on a reply
that is then refused are still counted. Nothing of a request or a reply is logged.
"""

from __future__ import annotations

import email.utils
import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, get_args

from detectors.faithfulness.judge_contract import ErrorKind
from detectors.faithfulness.prices import Usage

# What one attempt came to; every kind but ok is also an ErrorKind of the judge.
Failure = Literal[
    "malformed", "timeout", "rate_limited", "server_error", "client_error", "connection_error"
]
RequestOutcome = Literal["ok"] | Failure
REQUEST_OUTCOMES: tuple[RequestOutcome, ...] = ("ok", *get_args(Failure))
_T = TypeVar("_T")
MAX_RETRY_WAIT_S = 30.0
BACKOFF_BASE_S = 0.5
MAX_REPLY_BYTES = 4 << 20  # a chat completion of claims or verdicts is a few KB
_RETRIED: frozenset[Failure] = frozenset(
    ("timeout", "rate_limited", "server_error", "connection_error")
)


class ChatError(Exception):
    """A request that gave no usable reply, after its retries."""

    def __init__(self, kind: ErrorKind) -> None:
        super().__init__(kind)
        self.kind: ErrorKind = kind


class _Attempt(Exception):
    """One failed attempt: its outcome and, for a 429 or 5xx, the server's Retry-After."""

    def __init__(self, outcome: Failure, retry_after: float | None = None) -> None:
        super().__init__(outcome)
        self.outcome = outcome
        self.retry_after = retry_after


class ChatClient:
    """Posts chat completions to ``<endpoint>/chat/completions``; safe from many threads."""

    def __init__(
        self,
        endpoint: str,
        model: str,
        *,
        api_key: str | None,
        timeout_s: float,
        max_retries: int,
        on_attempt: Callable[[RequestOutcome, Usage | None], None],
        wait: Callable[[float], bool],
        max_tokens: int | None = None,
    ) -> None:
        """``wait(seconds)`` sleeps between attempts and returns True when the caller is
        stopping (then no further attempt is made); ``max_tokens``, when set, bounds each
        reply (a reply cut there has ``finish_reason: length``: malformed)."""
        self._url = f"{endpoint}/chat/completions"
        self._model = model
        self.max_tokens = max_tokens
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._timeout_s = timeout_s
        self._max_retries = max_retries
        self._on_attempt = on_attempt
        self._wait = wait

    def complete(
        self,
        messages: list[dict[str, str]],
        schema_name: str,
        schema: Mapping[str, Any],
        parse: Callable[[dict[str, Any]], _T],
    ) -> _T:
        """``parse`` of the reply's JSON object; raises ``ChatError`` when there is no reply
        ``parse`` accepts (it raises ``ValueError`` for an object off the schema)."""
        body = request_body(self._model, messages, schema_name, schema, self.max_tokens)
        for attempt in range(self._max_retries + 1):
            try:
                return self._attempt(body, parse)
            except _Attempt as failed:
                if failed.outcome not in _RETRIED or attempt == self._max_retries:
                    raise ChatError(failed.outcome) from None
                delay = failed.retry_after
                if delay is None:
                    delay = BACKOFF_BASE_S * 2**attempt * random.uniform(0.5, 1.0)
                if delay > MAX_RETRY_WAIT_S:
                    raise ChatError(failed.outcome) from None
                if self._wait(delay):
                    raise ChatError("cancelled") from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _attempt(self, body: bytes, parse: Callable[[dict[str, Any]], _T]) -> _T:
        """One POST; reports its outcome and usage, raises ``_Attempt`` when it failed."""
        # The endpoint's scheme is http or https: the config refuses any other.
        request = urllib.request.Request(self._url, body, self._headers, method="POST")  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=self._timeout_s) as response:  # noqa: S310
                raw = response.read(MAX_REPLY_BYTES + 1)
        except urllib.error.HTTPError as error:
            outcome = status_outcome(error.code)
            self._on_attempt(outcome, None)
            retry_after = parse_retry_after(error.headers.get("Retry-After"), time.time())
            error.close()
            raise _Attempt(outcome, retry_after) from None
        except TimeoutError:
            self._on_attempt("timeout", None)
            raise _Attempt("timeout") from None
        except urllib.error.URLError as error:
            outcome = "timeout" if isinstance(error.reason, TimeoutError) else "connection_error"
            self._on_attempt(outcome, None)
            raise _Attempt(outcome) from None
        except (OSError, ValueError):  # reset mid-read, a bad chunked body
            self._on_attempt("connection_error", None)
            raise _Attempt("connection_error") from None
        reply = _json_object(raw) if len(raw) <= MAX_REPLY_BYTES else None
        usage = read_usage(reply) if reply is not None else None
        content = read_content(reply) if reply is not None else None
        try:
            if content is None:
                raise ValueError("no JSON object in the reply")
            parsed = parse(content)
        except ValueError:
            self._on_attempt("malformed", usage)
            raise _Attempt("malformed") from None
        self._on_attempt("ok", usage)
        return parsed


def request_body(
    model: str,
    messages: list[dict[str, str]],
    schema_name: str,
    schema: Mapping[str, Any],
    max_tokens: int | None = None,
) -> bytes:
    """The bytes of one chat completions request (a cascade bounds a request's input
    tokens by their number before it is sent)."""
    fields: dict[str, Any] = {
        "model": model,
        "messages": messages,
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": schema_name, "schema": schema, "strict": True},
        },
    }
    if max_tokens is not None:
        fields["max_tokens"] = max_tokens
    return json.dumps(fields).encode()


def status_outcome(status: int) -> Failure:
    """What a non-200 status means for the request."""
    if status == 429:
        return "rate_limited"
    if status >= 500 or status == 408:
        return "server_error"
    return "client_error"


def parse_retry_after(value: str | None, now: float) -> float | None:
    """Seconds to wait from a Retry-After header (delay seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now)


def _json_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def read_usage(reply: Mapping[str, Any]) -> Usage | None:
    """The reply's ``usage`` (prompt and completion tokens), when it has a valid one."""
    usage = reply.get("usage")
    if not isinstance(usage, dict):
        return None
    tokens = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in tokens):
        return None
    return Usage(int(tokens[0] or 0), int(tokens[1] or 0))


def read_content(reply: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON object in the first choice's message; None for anything else (no choice, a
    cut or refused reply, text that is not a JSON object)."""
    choices = reply.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    choice = choices[0]
    if choice.get("finish_reason") not in ("stop", None):
        return None  # "length": the object is cut; "content_filter": withheld
    message = choice.get("message")
    if not isinstance(message, dict) or message.get("refusal"):
        return None
    content = message.get("content")
    return _json_object(content.encode()) if isinstance(content, str) else None
