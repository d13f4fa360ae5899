"""A fake OpenAI-compatible HTTP endpoint on loopback: the network boundary of the conformance tests.

Real clients (the openai SDK, Haystack's generators, LangChain's ChatOpenAI, agent
frameworks) talk to it over HTTP exactly as they would to the paid API. Answers and
token counts are deterministic, and every reply is recorded so that a test knows
what the "model" reported.

Offered tools, the model acts as an agent (Chat Completions and the Responses API):
it calls the first tool offered, one call per turn, with each of the queries its
``plans`` give the conversation's question, then answers. A smolagents-style
``final_answer`` tool among those offered carries the answer as a tool call.
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

FINAL_ANSWER_TOOL = "final_answer"  # smolagents' ToolCallingAgent answers by calling it


@dataclass(frozen=True)
class Reply:
    """One completion (Chat Completions or Responses API) or embedding the fake model returned."""

    kind: str  # "chat" or "embeddings"
    model: str
    prompt_tokens: int
    completion_tokens: int
    text: str  # the answer; "" for a call of a tool other than final_answer
    streamed: bool
    tool: str | None = None  # the tool the model called instead of answering in text
    arguments: str | None = None  # that call's JSON arguments


@dataclass(frozen=True)
class ToolCall:
    """A tool call the fake model makes."""

    call_id: str
    name: str
    arguments: str  # JSON


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
    # An agent's tool use per question (the key found in the conversation's first user
    # message): the queries of its tool calls, one per turn, before it answers; () answers
    # at once. A question without a plan makes one call with the question itself.
    plans: dict[str, tuple[str, ...]] = field(default_factory=dict)
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
                elif self.path.endswith("/responses"):
                    fake._responses(self, body)
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
        tools = [tool.get("function") or {} for tool in body.get("tools") or []]
        call: ToolCall | None = None
        if (
            self.judge is not None
            and (body.get("response_format") or {}).get("type") == "json_schema"
        ):
            text = json.dumps(self.judge(prompt_text))
        elif tools:
            # Each earlier turn of this agent left one assistant message (a tool call).
            done = sum(1 for message in messages if message.get("role") == "assistant")
            text, call = self._agent_turn(_first_user_text(messages), tools, done)
        model = body.get("model", "gpt-4o-mini")
        generated = call.arguments if call is not None else text
        usage = {
            "prompt_tokens": count_tokens(prompt_text),
            "completion_tokens": count_tokens(generated),
            "total_tokens": count_tokens(prompt_text) + count_tokens(generated),
        }
        stream = bool(body.get("stream"))
        self._record(Reply("chat", model, usage["prompt_tokens"], usage["completion_tokens"],
                           text, stream, *_named(call)))  # fmt: skip
        created = int(time.time())
        ident = "chatcmpl-" + hashlib.sha1(generated.encode()).hexdigest()[:12]  # noqa: S324
        time.sleep(self.delay_s)
        if call is not None:
            head = {"id": ident, "created": created, "model": model}
            self._send_tool_call(handler, body, head, call, usage)
            return
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

    def _agent_turn(
        self, first_user: str, tools: list[dict[str, Any]], done: int
    ) -> tuple[str, ToolCall | None]:
        """The agent's next step after ``done`` tool calls: (answer text, tool call or None)."""
        question = next((key for key in self.plans if key in first_user), first_user)
        queries = self.plans.get(question, (question,))
        answer = answer_for(question)
        names = [str(tool.get("name")) for tool in tools]
        search = next((tool for tool in tools if tool.get("name") != FINAL_ANSWER_TOOL), None)
        call_id = f"call_{done + 1}"
        if done < len(queries) and search is not None:
            parameters = (search.get("parameters") or {}).get("properties") or {}
            argument = next(iter(parameters), "query")
            arguments = json.dumps({argument: queries[done]})
            return "", ToolCall(call_id, str(search["name"]), arguments)
        if FINAL_ANSWER_TOOL in names:
            return answer, ToolCall(call_id, FINAL_ANSWER_TOOL, json.dumps({"answer": answer}))
        return answer, None

    def _send_tool_call(
        self,
        handler: BaseHTTPRequestHandler,
        body: dict[str, Any],
        head: dict[str, Any],
        call: ToolCall,
        usage: dict[str, int],
    ) -> None:
        tool_call = {"id": call.call_id, "type": "function",
                     "function": {"name": call.name, "arguments": call.arguments}}  # fmt: skip
        if not body.get("stream"):
            _send_json(handler, {
                **head, "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "tool_calls",
                             "message": {"role": "assistant", "content": None,
                                         "tool_calls": [tool_call]}}],
                "usage": usage,
            })  # fmt: skip
            return
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Connection", "close")
        handler.end_headers()
        base = {**head, "object": "chat.completion.chunk"}
        delta = {"role": "assistant", "content": None, "tool_calls": [{"index": 0, **tool_call}]}
        _send_event(handler, {**base, "choices": [
            {"index": 0, "delta": delta, "finish_reason": None}]})  # fmt: skip
        _send_event(handler, {**base, "choices": [
            {"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})  # fmt: skip
        if (body.get("stream_options") or {}).get("include_usage"):
            _send_event(handler, {**base, "choices": [], "usage": usage})
        handler.wfile.write(b"data: [DONE]\n\n")
        handler.wfile.flush()
        handler.close_connection = True

    def _responses(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        """The Responses API (``POST /v1/responses``), not streamed: the OpenAI Agents SDK's
        default model."""
        if body.get("stream"):
            handler.send_error(501, "the fake Responses API does not stream")
            return
        items = body.get("input") or []
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        instructions = str(body.get("instructions") or "")
        prompt_text = " ".join([instructions, *(_item_text(item) for item in items)]).strip()
        user = [_message_text(item) for item in items if item.get("role") == "user"]
        tools = [tool for tool in body.get("tools") or [] if tool.get("type") == "function"]
        done = sum(1 for item in items if item.get("type") == "function_call")
        text, call = answer_for((user[-1] if user else "")[-60:]), None
        if tools:
            text, call = self._agent_turn(user[0] if user else "", tools, done)
        model = body.get("model", "gpt-4o-mini")
        generated = call.arguments if call is not None else text
        prompt_tokens, completion_tokens = count_tokens(prompt_text), count_tokens(generated)
        self._record(Reply("chat", model, prompt_tokens, completion_tokens, text, False,
                           *_named(call)))  # fmt: skip
        ident = hashlib.sha1(generated.encode()).hexdigest()[:12]  # noqa: S324
        output: dict[str, Any]
        if call is not None:
            output = {"type": "function_call", "id": "fc_" + ident, "call_id": call.call_id,
                      "name": call.name, "arguments": call.arguments, "status": "completed"}  # fmt: skip
        else:
            output = {"type": "message", "id": "msg_" + ident, "role": "assistant",
                      "status": "completed",
                      "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
        time.sleep(self.delay_s)
        _send_json(handler, {
            "id": "resp_" + ident, "object": "response", "created_at": int(time.time()),
            "model": model, "status": "completed", "output": [output],
            "instructions": body.get("instructions"), "tools": body.get("tools") or [],
            "tool_choice": body.get("tool_choice") or "auto", "parallel_tool_calls": True,
            "usage": {"input_tokens": prompt_tokens, "output_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}},
        })  # fmt: skip

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


def _named(call: ToolCall | None) -> tuple[str | None, str | None]:
    """A reply's (tool, arguments)."""
    return (call.name, call.arguments) if call is not None else (None, None)


def _first_user_text(messages: list[dict[str, Any]]) -> str:
    """The conversation's question: its first user message (later ones may carry tool
    results, as smolagents sends them)."""
    return next((_message_text(m) for m in messages if m.get("role") == "user"), "")


def _item_text(item: dict[str, Any]) -> str:
    """The text of a Responses API input item: a message's content, a tool's output."""
    if item.get("type") == "function_call_output":
        return str(item.get("output") or "")
    return _message_text(item)


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
