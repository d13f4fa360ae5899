"""A bounded HTTP/1.1 server with a start / stop-intake / shutdown lifecycle, under the
OTLP/HTTP receiver and the metrics server.

One asyncio loop thread owns every connection: it reads request heads and bodies and
writes the answers, so an idle or slow client costs a socket and the bytes it sent, never
a thread. Complete requests go to a small pool (``handler_threads``): decoding and the
pipeline's ``submit`` block. Bounds (``HttpLimits``, ``monitor/contract/http/limits.py``):
``max_connections`` (at the bound the longest-idle keep-alive connection is closed to
make room, or else the new one is answered 503); ``header_timeout_s`` for the whole head
from its first byte (slowloris), ``max_header_bytes`` (431); ``body_timeout_s`` for the
whole body after the head, and for the client to take the answer; ``idle_timeout_s``
between requests. A body is buffered as it arrives: memory follows what was received,
never the declared Content-Length.

What all connections hold together is bounded by the server's ``ByteBudget``
(``monitor/contract/inflight.py``): a body's declared length is reserved before its first byte
is read and given back once it is answered (or the client left, or a timeout or an error
ended it); past the budget a new request is answered 503 + Retry-After at once, and its
body is read and dropped a chunk at a time. What the server itself closes or refuses
counts in ``rag_monitor_http_refused_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import structlog
from prometheus_client import Gauge

from monitor.contract.http.limits import HttpLimits, refused_counter
from monitor.contract.http.wire import (
    BODY_TOO_SLOW,
    BUSY,
    CONTINUE,
    HEAD_END,
    HEAD_TOO_LARGE,
    HEAD_TOO_SLOW,
    INFLIGHT_FULL,
    MALFORMED,
    NO_LENGTH,
    STOPPING,
    Request,
    Response,
    encode,
    parse_head,
)
from monitor.contract.inflight import ByteBudget
from monitor.contract.names import HTTP_CONNECTIONS
from monitor.contract.sidecar_registry import SidecarRegistry

log = structlog.get_logger("rag_monitor.http")

_POLL_S = 0.02
_LINGER_S = 2.0  # after an answer the server hangs up with, the client's late bytes are drained
_LOOP_CALL_S = 10.0  # a call into the loop thread answers at once unless the loop is stuck
_DISCARD_CHUNK = 1 << 16  # a refused body is read and dropped this much at a time


class HttpService:
    """A bounded HTTP/1.1 server on its own loop thread. Subclasses answer requests:
    ``refuse`` runs on the loop with the head only (cheap checks: route, auth, size),
    ``handle`` on a pool thread with the body. ``budget`` bounds the bytes of all requests
    in flight (several servers may share one). ``shutdown`` is safe before start and twice.
    """

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        limits: HttpLimits,
        *,
        registry: SidecarRegistry,
        budget: ByteBudget,
        discard_bytes: int = 0,
    ) -> None:
        self.name = name
        self.limits = limits
        self.budget = budget
        self._address = (host, port)
        # A refused body up to this size is read and dropped, so that a client still
        # sending sees the answer rather than a broken pipe; a larger one is hung up on.
        self._discard_bytes = discard_bytes
        self._refused = refused_counter(registry)
        self._connections: set[asyncio.WriteTransport] = set()
        # Connections waiting for their next request, longest-waiting first.
        self._idle: OrderedDict[asyncio.WriteTransport, None] = OrderedDict()
        self._hung_up: set[asyncio.WriteTransport] = set()  # answered, to linger then close
        registry.family(Gauge, HTTP_CONNECTIONS, "Open connections.", ["server"]).labels(
            name
        ).set_function(lambda: len(self._connections))
        self._in_flight = 0  # requests handed to a handler and not yet answered
        self._draining = False
        self._handler_failed = False
        self._pool = ThreadPoolExecutor(limits.handler_threads, f"{name}-handler")  # lazy threads
        self._server: asyncio.Server | None = None
        self._running: tuple[asyncio.AbstractEventLoop, threading.Thread] | None = None
        self._port = 0

    # --- what a subclass provides -------------------------------------------------------

    def refuse(self, request: Request) -> Response | None:
        """An answer that ends ``request`` before its body is read (on the loop), or None."""
        return None

    def handle(self, request: Request) -> Response:
        """The answer to a complete request (on a pool thread)."""
        return Response(404, b"not found\n")

    # --- lifecycle (any thread) ---------------------------------------------------------

    @property
    def port(self) -> int:
        """The bound port (useful when configured as 0)."""
        if self._running is None:
            raise RuntimeError("not started")
        return self._port

    def start(self) -> None:
        """Listen and serve on a new thread; raises when the address cannot be bound."""
        loop = asyncio.new_event_loop()
        try:
            self._server = loop.run_until_complete(
                asyncio.start_server(
                    self._serve, *self._address, limit=self.limits.max_header_bytes
                )
            )
        except BaseException:
            loop.close()
            raise
        self._port = int(self._server.sockets[0].getsockname()[1])
        thread = threading.Thread(target=_run_loop, args=(loop,), name=self.name, daemon=True)
        self._running = (loop, thread)
        thread.start()

    def stop_intake(self, timeout_s: float) -> bool:
        """Stop listening, close idle connections, answer later requests 503 with
        Retry-After and ``Connection: close``, and wait up to ``timeout_s`` for the
        requests already in a handler to be answered. True when none is left."""
        if self._running is None:
            return True
        loop = self._running[0]
        asyncio.run_coroutine_threadsafe(self._stop_accepting(), loop).result(_LOOP_CALL_S)
        deadline = time.monotonic() + timeout_s
        while self._in_flight and time.monotonic() < deadline:
            time.sleep(_POLL_S)
        if self._in_flight:
            log.warning("http_stop_timeout", server=self.name, in_flight=self._in_flight)
        return self._in_flight == 0

    def shutdown(self) -> None:
        """Close every connection and stop the thread."""
        running, self._running = self._running, None
        if running is None:
            return
        loop, thread = running
        asyncio.run_coroutine_threadsafe(self._close_all(), loop).result(_LOOP_CALL_S)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _stop_accepting(self) -> None:
        self._draining = True
        if self._server is not None:
            self._server.close()
        while self._idle:
            connection, _ = self._idle.popitem(last=False)
            self._count("stopping")
            connection.close()

    async def _close_all(self) -> None:
        await self._stop_accepting()
        for connection in list(self._connections):
            connection.abort()
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- the loop thread ----------------------------------------------------------------

    def _count(self, reason: str) -> None:
        self._refused.labels(self.name, reason).inc()

    def _admit(self, connection: asyncio.WriteTransport) -> bool:
        if self._draining:
            self._hang_up(connection, STOPPING, "stopping")
            return False
        if len(self._connections) >= self.limits.max_connections:
            if not self._idle:
                self._hang_up(connection, BUSY, "max_connections")
                return False
            oldest, _ = self._idle.popitem(last=False)
            self._connections.discard(oldest)
            self._count("idle_evicted")
            oldest.close()
        self._connections.add(connection)
        return True

    def _hang_up(self, connection: asyncio.WriteTransport, response: Response, reason: str) -> None:
        """Answer without waiting for the client to take it, count, and end the connection
        (``_serve`` then lingers)."""
        self._count(reason)
        connection.write(encode(response, keep_alive=False))
        self._hung_up.add(connection)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = writer.transport
        try:
            if self._admit(connection):
                while (request := await self._read_head(reader, connection)) is not None:
                    if not await self._exchange(reader, writer, request):
                        break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away
        finally:
            self._connections.discard(connection)
            self._idle.pop(connection, None)
            if connection in self._hung_up:
                self._hung_up.discard(connection)
                await _linger(reader, connection)
            connection.close()

    async def _read_head(
        self, reader: asyncio.StreamReader, connection: asyncio.WriteTransport
    ) -> Request | None:
        self._idle[connection] = None
        try:
            async with asyncio.timeout(self.limits.idle_timeout_s):
                first = await reader.read(1)
        except TimeoutError:
            self._count("idle_timeout")
            return None
        finally:
            self._idle.pop(connection, None)
        if not first:
            return None  # closed by the client, or by us to make room
        try:
            async with asyncio.timeout(self.limits.header_timeout_s):
                head = first + await reader.readuntil(HEAD_END)
        except TimeoutError:
            self._hang_up(connection, HEAD_TOO_SLOW, "header_timeout")
            return None
        except asyncio.LimitOverrunError:
            self._hang_up(connection, HEAD_TOO_LARGE, "header_too_large")
            return None
        request = parse_head(head)
        if request is None:
            self._hang_up(connection, MALFORMED, "bad_request")
        return request

    async def _exchange(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: Request
    ) -> bool:
        """Read the body and answer; True when the connection stays open for another."""
        refusal = self._answer_before_body(request)
        if refusal is not None:
            return await self._refuse(reader, writer, request, refusal)
        length = request.content_length or 0
        try:  # admitted: the body's bytes are reserved until it is answered
            if _expects_continue(request):
                writer.write(CONTINUE)
            body = await self._read_body(reader, writer, length)
            if body is None:
                return False
            if self._draining:  # the stop began while the body arrived
                self._count("stopping")
                return await self._write(writer, request, STOPPING)
            self._in_flight += 1
            try:
                loop = asyncio.get_running_loop()
                full = dataclasses.replace(request, body=body)
                response = await loop.run_in_executor(self._pool, self._call_handle, full)
                return await self._write(writer, request, response)
            finally:
                self._in_flight -= 1
        finally:
            self.budget.release(length)

    def _answer_before_body(self, request: Request) -> Response | None:
        """The answer that ends ``request`` before its body is read, or None when the
        body is admitted: its declared length is then reserved in the budget."""
        if self._draining:
            self._count("stopping")
            return STOPPING
        refusal = self.refuse(request)
        if refusal is None and not request.framed:
            refusal = NO_LENGTH
        if refusal is None and not self.budget.admit(request.content_length or 0):
            self._count("inflight_bytes")
            refusal = INFLIGHT_FULL
        return refusal

    async def _refuse(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: Request,
        refusal: Response,
    ) -> bool:
        """Answer before reading the body, then read and drop the body so that the
        connection can take another request. A body that cannot be framed, is over
        ``discard_bytes``, or waits for 100 Continue is not read: the server hangs up."""
        length = request.content_length or 0
        if not request.framed or length > self._discard_bytes or _expects_continue(request):
            refusal = dataclasses.replace(refusal, close=True)
        if not await self._write(writer, request, refusal):
            self._hung_up.add(writer.transport)  # linger: the client may still be sending
            return False
        return await self._discard_body(reader, length)

    async def _read_body(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, length: int
    ) -> bytes | None:
        if length == 0:
            return b""
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                # Taken as it arrives: nothing of ``length`` is allocated before the bytes
                # are there. Not readexactly, whose buffer grows by an eighth at a time and
                # copies what it holds at each step (half the loop thread's CPU, 1.7 MB bodies).
                chunks: list[bytes] = []
                while length > 0:
                    chunk = await reader.read(length)
                    if not chunk:
                        raise asyncio.IncompleteReadError(b"".join(chunks), None)
                    chunks.append(chunk)
                    length -= len(chunk)
                return b"".join(chunks)  # one chunk is returned as it is
        except TimeoutError:
            self._hang_up(writer.transport, BODY_TOO_SLOW, "body_timeout")
            return None

    async def _discard_body(self, reader: asyncio.StreamReader, length: int) -> bool:
        """Read and drop a refused body, holding one chunk at a time; True when all of it
        arrived within ``body_timeout_s`` (the answer is already written)."""
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                while length > 0:
                    chunk = await reader.read(min(length, _DISCARD_CHUNK))
                    if not chunk:
                        return False
                    length -= len(chunk)
        except TimeoutError:
            self._count("body_timeout")
            return False
        return True

    async def _write(
        self, writer: asyncio.StreamWriter, request: Request, response: Response
    ) -> bool:
        keep_alive = request.keep_alive and not response.close and not self._draining
        writer.write(encode(response, keep_alive))
        try:
            async with asyncio.timeout(self.limits.body_timeout_s):
                await writer.drain()
        except TimeoutError:
            self._count("write_timeout")
            return False
        return keep_alive

    def _call_handle(self, request: Request) -> Response:
        try:
            return self.handle(request)
        except Exception as exc:
            self._count("handler_error")
            if not self._handler_failed:  # one line, not one per request; no request text
                self._handler_failed = True
                log.error("http_handler_failed", server=self.name, error=type(exc).__name__)
            return Response(500, b"internal error\n", close=True)


def _expects_continue(request: Request) -> bool:
    return request.headers.get("expect", "").lower() == "100-continue"


async def _linger(reader: asyncio.StreamReader, connection: asyncio.WriteTransport) -> None:
    """Half-close, then drop what the client still sends for up to ``_LINGER_S``: closing
    a socket with unread bytes makes the kernel send a reset, which can destroy the answer
    before the client has read it (a slowloris client is mid-head when answered 408)."""
    if connection.is_closing() or not connection.can_write_eof():
        return
    connection.write_eof()
    with contextlib.suppress(TimeoutError, ConnectionError):
        async with asyncio.timeout(_LINGER_S):
            while await reader.read(1 << 16):
                pass


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    loop.run_forever()
    loop.close()
