"""HTTP/1.1 on the wire: the request head parser, the response encoder and the
answers the server gives on its own (``monitor/contract/http/service.py`` moves the bytes)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus

HEAD_END = b"\r\n\r\n"
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Request:
    """One request: ``refuse`` sees it without its body, ``handle`` with it."""

    method: str
    path: str  # without the query string
    headers: Mapping[str, str]  # names in lower case
    content_length: int | None  # None: absent (a chunked body cannot be framed)
    keep_alive: bool
    body: bytes = b""
    query: str = ""  # the raw query string, without the "?"

    @property
    def framed(self) -> bool:
        """The body's end is known: Content-Length, or no body at all."""
        return self.content_length is not None or "transfer-encoding" not in self.headers


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    body: bytes
    content_type: str = "text/plain"
    headers: Mapping[str, str] = field(default_factory=dict)
    close: bool = False  # hang up after answering


RETRY = {"Retry-After": "1"}
STOPPING = Response(503, b"stopping, retry\n", headers=RETRY, close=True)
BUSY = Response(503, b"too many connections\n", headers=RETRY)
INFLIGHT_FULL = Response(503, b"too many request bytes in flight, retry\n", headers=RETRY)
HEAD_TOO_SLOW = Response(408, b"request head too slow\n")
HEAD_TOO_LARGE = Response(431, b"request head too large\n")
MALFORMED = Response(400, b"malformed request\n")
BODY_TOO_SLOW = Response(408, b"request body too slow\n")
NO_LENGTH = Response(411, b"Content-Length is required\n", close=True)


def parse_head(raw: bytes) -> Request | None:
    """The request line and headers, or None when they are not HTTP/1.x."""
    lines = raw[: -len(HEAD_END)].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0"):
        return None
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            return None
        key, value = name.lower(), value.strip()
        if key == "content-length" and headers.get(key, value) != value:
            return None  # two different lengths: refuse rather than guess (smuggling)
        headers[key] = value
    declared = headers.get("content-length")
    if declared is not None and not (declared.isascii() and declared.isdigit()):
        return None  # int() would take other digits, say a superscript two
    if declared is not None and "transfer-encoding" in headers:
        return None  # both: refuse rather than guess (request smuggling)
    length = None if declared is None else int(declared)
    connection = headers.get("connection", "").lower()
    keep_alive = connection != "close" if version == "HTTP/1.1" else connection == "keep-alive"
    path, _, query = target.partition("?")
    return Request(method, path, headers, length, keep_alive, query=query)


def encode(response: Response, keep_alive: bool) -> bytes:
    lines = [
        f"HTTP/1.1 {response.status} {HTTPStatus(response.status).phrase}",
        f"Content-Type: {response.content_type}",
        f"Content-Length: {len(response.body)}",
        *(f"{name}: {value}" for name, value in response.headers.items()),
    ]
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + response.body
