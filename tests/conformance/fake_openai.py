"""A fake OpenAI-compatible HTTP endpoint on loopback: the network boundary of the conformance tests.

Real clients (the openai SDK, Haystack's generators, LangChain's ChatOpenAI)
talk to it over HTTP exactly as they would to the paid API. Answers and token
counts are deterministic, and every reply is recorded so that a test knows
what the "model" reported.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Reply:
    """One completion or embedding the fake model returned."""

    kind: str  # "chat" or "embeddings"
    model: str
    prompt_tokens: int
    completion_tokens: int
    text: str
    streamed: bool


def count_tokens(text: str) -> int:
    """The fake tokenizer: one token per whitespace-separated word."""
    return len(text.split())


def embed(text: str, dimensions: int = 8) -> list[float]:
    """A deterministic unit-free vector for ``text``."""
    digest = hashlib.sha256(text.encode()).digest()
    return [(byte - 128) / 128 for byte in digest[:dimensions]]


def answer_for(question: str) -> str:
    """The fake model's answer: deterministic, several words (streamed word by word)."""
    return f"According to the documents, the answer to {question!r} is forty two."


@dataclass
class FakeOpenAI:
    """The server; ``base_url`` is what a client's ``base_url`` / ``api_base`` takes."""

    replies: list[Reply] = field(default_factory=list)
    delay_s: float = 0.005
    # An LLM judge's verdict: a request for a JSON-schema answer (structured output) gets
    # judge(prompt text) as its JSON content instead of the fixed answer.
    judge: Callable[[str], dict[str, Any]] | None = None
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def base_url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> FakeOpenAI:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                if self.path.endswith("/chat/completions"):
                    fake._chat(self, body)
                elif self.path.endswith("/embeddings"):
                    fake._embeddings(self, body)
                else:
                    self.send_error(404)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    def _record(self, reply: Reply) -> None:
        with self._lock:
            self.replies.append(reply)

    def _chat(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        messages = body.get("messages", [])
        prompt_text = " ".join(_message_text(m) for m in messages)
        question = next(
            (_message_text(m) for m in reversed(messages) if m.get("role") == "user"), ""
        )
        text = answer_for(question[-60:])
        if (
            self.judge is not None
            and (body.get("response_format") or {}).get("type") == "json_schema"
        ):
            text = json.dumps(self.judge(prompt_text))
        model = body.get("model", "gpt-4o-mini")
        usage = {
            "prompt_tokens": count_tokens(prompt_text),
            "completion_tokens": count_tokens(text),
            "total_tokens": count_tokens(prompt_text) + count_tokens(text),
        }
        stream = bool(body.get("stream"))
        self._record(Reply("chat", model, usage["prompt_tokens"], usage["completion_tokens"],
                           text, stream))  # fmt: skip
        created = int(time.time())
        ident = "chatcmpl-" + hashlib.sha1(text.encode()).hexdigest()[:12]  # noqa: S324
        time.sleep(self.delay_s)
        if not stream:
            _send_json(handler, {
                "id": ident, "object": "chat.completion", "created": created, "model": model,
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": text}}],
                "usage": usage,
            })  # fmt: skip
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        base = {"id": ident, "object": "chat.completion.chunk", "created": created, "model": model}
        words = text.split(" ")
        for index, word in enumerate(words):
            piece = word if index == 0 else " " + word
            delta: dict[str, Any] = {"content": piece}
            if index == 0:
                delta["role"] = "assistant"
            _send_event(handler, {**base, "choices": [
                {"index": 0, "delta": delta, "finish_reason": None}]})  # fmt: skip
            time.sleep(self.delay_s / 5)
        _send_event(handler, {**base, "choices": [
            {"index": 0, "delta": {}, "finish_reason": "stop"}]})  # fmt: skip
        if (body.get("stream_options") or {}).get("include_usage"):
            _send_event(handler, {**base, "choices": [], "usage": usage})
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()
        handler.close_connection = True

    def _embeddings(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        inputs = body.get("input", [])
        texts = [inputs] if isinstance(inputs, str) else [str(item) for item in inputs]
        model = body.get("model", "text-embedding-3-small")
        tokens = sum(count_tokens(text) for text in texts)
        self._record(Reply("embeddings", model, tokens, 0, "", False))
        _send_json(handler, {
            "object": "list", "model": model,
            "data": [{"object": "embedding", "index": i, "embedding": embed(text)}
                     for i, text in enumerate(texts)],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        })  # fmt: skip


def _message_text(message: dict[str, Any]) -> str:
    content = message.get("content") or ""
    if isinstance(content, list):  # content parts
        return " ".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content)


def _send_json(handler: BaseHTTPRequestHandler, document: dict[str, Any]) -> None:
    payload = json.dumps(document).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(payload)))
    handler.end_headers()
    handler.wfile.write(payload)


def _send_event(handler: BaseHTTPRequestHandler, document: dict[str, Any]) -> None:
    handler.wfile.write(b"data: " + json.dumps(document).encode() + b"\n\n")
    handler.wfile.flush()
