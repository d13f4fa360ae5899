"""A fake OpenAI-compatible chat completions server on 127.0.0.1, for the LLM judge's tests.

A real HTTP server (the network boundary: what cannot run here is the paid model behind
it). It answers the judge's two requests from a script: the claims of each scripted
answer (an extraction request names the answer), and a verdict per claim (a
verification request numbers the claims). Faults are scripted per answer and taken in
order, one per extraction request: ``malformed`` (content that is not JSON),
``extra_key`` (an object off the schema), ``slow`` (no reply within the client's timeout),
``429`` and ``500`` (Retry-After: 1), ``429-long`` (Retry-After: 3600). A claim scripted ``None`` gets no verdict (a verification
reply off its schema). Every request is recorded, and every 200 reply reports ``USAGE``,
or what the script's ``usage`` says for that request and reply; the script's
``on_reply`` hears each 200 reply before it is sent (a test's clock, its spend record).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE = {"prompt_tokens": 120, "completion_tokens": 15, "total_tokens": 135}
SLOW_S = 1.5


@dataclass
class Seen:
    """One request the server received."""

    at: float  # time.monotonic()
    headers: dict[str, str]
    body: dict[str, Any]
    status: int = 200
    late: bool = False  # answered after the client's timeout: the client never read it
    usage: dict[str, int] | None = None  # what a 200 reply reported

    @property
    def schema_name(self) -> str:
        return str(self.body["response_format"]["json_schema"]["name"])

    @property
    def user(self) -> str:
        return str(self.body["messages"][-1]["content"])


@dataclass
class Script:
    """What the fake model answers."""

    claims: dict[str, list[str]] = field(default_factory=dict)  # answer -> its claims
    verdicts: dict[str, bool | None] = field(default_factory=dict)  # claim -> supported
    faults: dict[str, list[str]] = field(default_factory=dict)  # answer -> faults in turn
    # The usage a 200 reply reports, from the request and the reply's content (USAGE: None).
    usage: Callable[[Seen, str], dict[str, int]] | None = None
    on_reply: Callable[[Seen], None] | None = None  # each 200 reply, before it is sent


class FakeOpenAI:
    """The server's state: the script, the requests seen, and 200 replies the client read."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self.ok_replies = 0
        self.lock = threading.Lock()
        self.port = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def requests_for(self, answer: str) -> list[Seen]:
        """The extraction requests that named ``answer``."""
        return [s for s in self.seen if s.schema_name == "claims" and _answer_in(s.user, answer)]

    def reply(self, seen: Seen) -> tuple[int, dict[str, str], bytes]:
        """Status, headers and body for one request (with its fault, if one is due)."""
        content: Any
        if seen.schema_name == "claims":
            answer = next(a for a in self.script.claims if _answer_in(seen.user, a))
            with self.lock:
                faults = self.script.faults.get(answer, [])
                fault = faults.pop(0) if faults else None
            if fault == "slow":
                time.sleep(SLOW_S)
                seen.late = True
            if fault in ("429", "500", "429-long"):
                wait = "3600" if fault == "429-long" else "1"
                return int(fault[:3]), {"Retry-After": wait}, b'{"error": {"message": "busy"}}'
            content = {"claims": self.script.claims[answer]}
            if fault == "malformed":
                content = "the claims are: one, two"
            elif fault == "extra_key":
                content = {"claims": self.script.claims[answer], "note": "also this"}
        else:
            verdicts = [
                {"claim": entry["claim"], "verdict": "supported" if supported else "unsupported"}
                for entry in json.loads(seen.user)["claims"]
                if (supported := self.script.verdicts[entry["text"]]) is not None
            ]
            content = {"verdicts": verdicts}
        text = content if isinstance(content, str) else json.dumps(content)
        seen.usage = USAGE if self.script.usage is None else self.script.usage(seen, text)
        if self.script.on_reply is not None:
            self.script.on_reply(seen)
        with self.lock:
            self.ok_replies += not seen.late
        body = {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": seen.body["model"],
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": "stop",
                }
            ],
            "usage": seen.usage,
        }
        return 200, {}, json.dumps(body).encode()


def _answer_in(user: str, answer: str) -> bool:
    """Whether an extraction request's user message (a JSON object) holds ``answer``."""
    return bool(json.loads(user).get("answer") == answer)


@contextmanager
def fake_openai(script: Script) -> Iterator[FakeOpenAI]:
    """Serve ``script`` on a free loopback port until the block ends."""
    fake = FakeOpenAI(script)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            seen = Seen(time.monotonic(), dict(self.headers), json.loads(self.rfile.read(length)))
            with fake.lock:
                fake.seen.append(seen)
            status, headers, body = (
                fake.reply(seen) if self.path == "/v1/chat/completions" else (404, {}, b"{}")
            )
            seen.status = status
            try:
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:
                pass  # the client gave up (a timeout): nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the test reads ``seen``."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    fake.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
