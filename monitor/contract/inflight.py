"""A budget for the bytes of requests in flight, shared by the servers that take them.

Connections and message sizes bound one client each; nothing else bounds what all
of them hold together (1,024 connections x an 8 MiB body is 8 GiB). A ``ByteBudget``
does. A server ``admit``s a request's bytes before it takes them: the declared body
of an HTTP request before its body is read, a gRPC message as grpc hands it over;
past the budget the request is refused with a retryable answer and nothing of it is
kept. ``release`` gives the bytes back once the request is answered, whatever ended
it. Decoding makes more of the same bytes (the parsed message, the spans), so a
request that decodes holds ``decoding(n)`` more while it does: that waits while the
bytes do not fit and another decode is running, and goes ahead alone even past the
budget, so that admitted requests always finish and the budget is overshot by one
decode at most.

``rag_monitor_inflight_bytes{budget}`` and ``rag_monitor_inflight_max_bytes{budget}``
show it; the refusals count in ``rag_monitor_http_refused_total`` with reason
``inflight_bytes``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

# What decoding an OTLP request holds beyond its body, per byte of the (inflated)
# body, while it runs: the parsed protobuf message and the decoded spans are both
# alive at the end of a decode. Measured (tests/perf/probe_inflight.py --decode):
# 1.4x + 1.6x for spans that carry retrieved documents, 7.4x + 8.7x for 2,000
# spans of eight integer attributes each (many small messages); OTLP/JSON's parsed
# document is 2.7x. The bound takes the worst of these.
OTLP_DECODE_FACTOR = 16


class ByteBudget:
    """Bytes reserved by requests in flight, at most ``limit`` (plus one decode).
    Thread-safe: the HTTP loop, HTTP handler threads and gRPC threads share one."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self._reserved = 0
        self._decoding = 0  # decodes holding their bytes now
        self._changed = threading.Condition()

    @property
    def reserved(self) -> int:
        """Bytes reserved now."""
        return self._reserved

    def admit(self, size: int) -> bool:
        """Reserve ``size`` bytes when they fit under the limit; False (nothing
        reserved) when they do not."""
        with self._changed:
            if self._reserved + size > self.limit:
                return False
            self._reserved += size
            return True

    def release(self, size: int) -> None:
        """Give back bytes an ``admit`` reserved."""
        with self._changed:
            self._reserved -= size
            self._changed.notify_all()

    @contextmanager
    def decoding(self, size: int) -> Iterator[None]:
        """Hold ``size`` more bytes while the block runs. Waits while they do not fit
        and another decode holds bytes; alone, it goes ahead past the limit (an
        admitted request always finishes, and the overshoot is one decode)."""
        with self._changed:
            while self._decoding and self._reserved + size > self.limit:
                self._changed.wait()
            self._reserved += size
            self._decoding += 1
        try:
            yield
        finally:
            with self._changed:
                self._reserved -= size
                self._decoding -= 1
                self._changed.notify_all()
