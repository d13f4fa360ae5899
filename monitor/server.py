"""HTTP plumbing: a threaded server with a start/shutdown lifecycle, and the
sidecar's own endpoints /metrics, /healthz and /readyz."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 keep-alive handler that writes no access log (no log line per record)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:
        pass

    def send_body(
        self,
        status: int,
        body: bytes,
        content_type: str,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class HttpService:
    """A ``ThreadingHTTPServer`` on its own thread; ``shutdown`` is safe before start and twice."""

    def __init__(self, host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> None:
        self._address = (host, port)
        self._handler = handler
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        """The bound port (useful when configured as 0)."""
        if self._server is None:
            raise RuntimeError("not started")
        return int(self._server.server_address[1])

    def start(self) -> None:
        server = ThreadingHTTPServer(self._address, self._handler)
        server.daemon_threads = True
        server.service = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="http", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None


class Readiness:
    """Named readiness checks; the sidecar is ready when all pass."""

    def __init__(self) -> None:
        self._checks: dict[str, Callable[[], bool]] = {}

    def add(self, name: str, check: Callable[[], bool]) -> None:
        self._checks[name] = check

    def status(self) -> dict[str, bool]:
        return {name: bool(check()) for name, check in self._checks.items()}


class MetricsServer(HttpService):
    """Serves /metrics from ``registry``, /healthz (no supervised worker failing: ``health``
    names the failing ones) and /readyz (all checks pass)."""

    def __init__(
        self,
        host: str,
        port: int,
        registry: CollectorRegistry,
        readiness: Readiness,
        health: Callable[[], Mapping[str, str]] = dict,
    ) -> None:
        self.registry = registry
        self.readiness = readiness
        self.health = health
        super().__init__(host, port, _MetricsHandler)


class _MetricsHandler(QuietHandler):
    server: ThreadingHTTPServer

    def do_GET(self) -> None:
        service: MetricsServer = self.server.service  # type: ignore[attr-defined]
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
            self.send_body(200, encoder(service.registry), content_type)
        elif path == "/healthz":
            failing = service.health()
            if failing:
                body = orjson.dumps({"status": "failing", "workers": dict(failing)})
                self.send_body(503, body, "application/json")
            else:
                self.send_body(200, b'{"status":"ok"}', "application/json")
        elif path == "/readyz":
            checks = service.readiness.status()
            ready = all(checks.values())
            body = orjson.dumps({"ready": ready, "checks": checks})
            self.send_body(200 if ready else 503, body, "application/json")
        else:
            self.send_body(404, b"not found\n", "text/plain")
