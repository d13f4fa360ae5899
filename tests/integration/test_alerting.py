"""End to end: sidecar -> real Prometheus (scrape, generated rules) -> real Alertmanager -> webhook."""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from alerts.rules import render_rules
from monitor.config import Config
from monitor.sidecar import Sidecar
from tests.conftest import free_port, sample, wait_until
from tests.integration.test_otlp import STAGES, requests_for
from tests.otel_traffic import RagRequest, emit_rag_request, tracer_for

pytestmark = pytest.mark.integration

StartSidecar = Callable[..., Sidecar]
JOB = "rag-monitor"
# A short rate window keeps the p95 responsive enough for a test of about a minute.
TEST_WINDOW = "15s"
GENERATE_SLO_S = 0.5


def with_test_window(config: Config) -> Config:
    """``config`` with the short ``guardrails.window`` of these tests."""
    guardrails = config.guardrails.model_copy(update={"window": TEST_WINDOW})
    return config.model_copy(update={"guardrails": guardrails})


def binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (Debian: prometheus, prometheus-alertmanager)")
    return path


def http_get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


# --- the webhook receiver ------------------------------------------------------------------


class Webhook:
    """An HTTP server inside the test that keeps every Alertmanager notification."""

    def __init__(self) -> None:
        self.notifications: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        webhook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with webhook._lock:
                    webhook.notifications.append(json.loads(body))
                self.send_response(200)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/alerts"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def alerts(self, alertname: str, status: str) -> list[dict[str, Any]]:
        """Alerts named ``alertname`` with ``status`` (firing/resolved) received so far."""
        with self._lock:
            return [
                alert
                for notification in self.notifications
                for alert in notification["alerts"]
                if alert["labels"].get("alertname") == alertname and alert["status"] == status
            ]

    def shutdown(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def webhook() -> Iterator[Webhook]:
    receiver = Webhook()
    yield receiver
    receiver.shutdown()


# --- Prometheus and Alertmanager processes ----------------------------------------------------


class Services:
    """Starts real Prometheus and Alertmanager processes in a temp dir on free ports."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.processes: list[subprocess.Popen[bytes]] = []

    def _start(self, name: str, argv: list[str], ready_url: str) -> None:
        with (self.directory / f"{name}.log").open("ab") as log:
            process = subprocess.Popen(
                argv, cwd=self.directory, stdout=log, stderr=subprocess.STDOUT
            )
        self.processes.append(process)

        def ready() -> bool:
            if process.poll() is not None:
                log_text = (self.directory / f"{name}.log").read_text(errors="replace")
                raise AssertionError(f"{name} exited with {process.returncode}:\n{log_text}")
            return http_get(ready_url)[0] == 200

        wait_until(ready, timeout=30, every=0.1)

    def start_alertmanager(self, webhook_url: str) -> str:
        """Alertmanager routing everything to ``webhook_url`` at once; returns its base URL."""
        config = {
            "route": {
                "receiver": "webhook",
                "group_by": ["alertname", "stage"],
                "group_wait": "1s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [
                {
                    "name": "webhook",
                    "webhook_configs": [{"url": webhook_url, "send_resolved": True}],
                }
            ],
        }
        config_path = self.directory / "alertmanager.yml"
        config_path.write_text(yaml.safe_dump(config))
        address = f"127.0.0.1:{free_port()}"
        self._start(
            "alertmanager",
            [
                binary("prometheus-alertmanager"),
                f"--config.file={config_path}",
                f"--storage.path={self.directory / 'alertmanager-data'}",
                f"--web.listen-address={address}",
                "--cluster.listen-address=",
            ],
            f"http://{address}/-/ready",
        )
        return f"http://{address}"

    def start_prometheus(
        self, sidecar: Sidecar, rules: str | None = None, alertmanager: str | None = None
    ) -> str:
        """Prometheus scraping ``sidecar`` every second; returns its base URL."""
        config: dict[str, Any] = {
            "global": {
                "scrape_interval": "1s",
                "evaluation_interval": "1s",
                "scrape_timeout": "1s",
            },
            "scrape_configs": [
                {
                    "job_name": JOB,
                    "static_configs": [{"targets": [f"127.0.0.1:{sidecar.metrics_server.port}"]}],
                }
            ],
        }
        if rules is not None:
            (self.directory / "rules.yaml").write_text(rules)
            config["rule_files"] = ["rules.yaml"]
        if alertmanager is not None:
            target = urllib.parse.urlsplit(alertmanager).netloc
            config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [target]}]}]}
        config_path = self.directory / "prometheus.yml"
        config_path.write_text(yaml.safe_dump(config))
        address = f"127.0.0.1:{free_port()}"
        self._start(
            "prometheus",
            [
                binary("prometheus"),
                f"--config.file={config_path}",
                f"--storage.tsdb.path={self.directory / 'prometheus-data'}",
                f"--web.listen-address={address}",
                # resolved and firing alerts reach Alertmanager within a second
                "--rules.alert.resend-delay=1s",
            ],
            f"http://{address}/-/ready",
        )
        return f"http://{address}"

    def shutdown(self) -> None:
        for process in reversed(self.processes):
            process.terminate()
        for process in self.processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    started = Services(tmp_path)
    yield started
    started.shutdown()


def query_series(prometheus: str, promql: str) -> dict[frozenset[tuple[str, str]], float]:
    """Evaluate ``promql`` now via /api/v1/query: {labels: value} for each series of the result."""
    url = f"{prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": promql})
    status, body = http_get(url)
    assert status == 200, body
    answer = json.loads(body)
    assert answer["status"] == "success", answer
    assert answer["data"]["resultType"] == "vector", answer
    return {
        frozenset(item["metric"].items()): float(item["value"][1])
        for item in answer["data"]["result"]
    }


def query_value(prometheus: str, promql: str) -> float | None:
    """The single value of ``promql`` (e.g. ``sum(rag_cost_usd_total)``); None if no series."""
    series = query_series(prometheus, promql)
    assert len(series) <= 1, series
    return next(iter(series.values()), None)


# --- traffic ---------------------------------------------------------------------------------


class SteadyTraffic:
    """Sends OpenInference requests every ``every`` seconds through the real OTLP/HTTP exporter.

    Each round is ``rounds()``, by default one request whose generate stage lasts
    ``generate_s`` (which may be changed while it runs).
    """

    def __init__(
        self,
        sidecar: Sidecar,
        generate_s: float = 0.5,
        every: float = 0.05,
        rounds: Callable[[], Sequence[RagRequest]] | None = None,
    ) -> None:
        endpoint = f"http://127.0.0.1:{sidecar.http.port}/v1/traces"  # type: ignore[union-attr]
        self.provider, self.tracer = tracer_for(OTLPSpanExporter(endpoint=endpoint))
        self.generate_s = generate_s
        self.every = every
        self.sent = 0
        self._rounds = rounds or self._one_request
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _one_request(self) -> list[RagRequest]:
        return [RagRequest(start_ns=time.time_ns(), generate_s=self.generate_s)]

    def _run(self) -> None:
        while not self._stop.is_set():
            for request in self._rounds():
                emit_rag_request(self.tracer, request)
                self.sent += 1
            self._stop.wait(self.every)

    def __enter__(self) -> SteadyTraffic:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self.provider.shutdown()


# --- tests -----------------------------------------------------------------------------------


def test_slow_generate_stage_fires_then_resolves_at_the_webhook(
    start_sidecar: StartSidecar, services: Services, webhook: Webhook
) -> None:
    """Slow generate spans fire RagStageLatencySLOBreach at the webhook; fast ones resolve it."""
    sidecar = start_sidecar()
    config = Config.model_validate(
        {
            "guardrails": {
                "for": "0s",
                "latency_p95_slo_s": {"generate": GENERATE_SLO_S},
                "window": TEST_WINDOW,
            }
        }
    )
    alertmanager = services.start_alertmanager(webhook.url)
    services.start_prometheus(sidecar, render_rules(config), alertmanager=alertmanager)
    with SteadyTraffic(sidecar, generate_s=1.0) as traffic:
        firing = wait_until(
            lambda: webhook.alerts("RagStageLatencySLOBreach", "firing"), timeout=60, every=0.2
        )
        assert webhook.alerts("RagStageLatencySLOBreach", "resolved") == []
        traffic.generate_s = 0.05
        resolved = wait_until(
            lambda: webhook.alerts("RagStageLatencySLOBreach", "resolved"), timeout=60, every=0.2
        )
    for alert in (firing[0], resolved[0]):
        assert alert["labels"] == {
            "alertname": "RagStageLatencySLOBreach",
            "job": JOB,
            "stage": "generate",
            "severity": "page",
            "slo_seconds": "0.5",
        }
        assert alert["annotations"]["runbook"] == "README.md#ragstagelatencyslobreach"
    assert "SLO is 0.5s" in firing[0]["annotations"]["description"]
    # only the stage with an SLO alerted, though every request was slow in total as well
    stages = {
        a["labels"]["stage"]
        for n in webhook.notifications
        for a in n["alerts"]
        if a["labels"]["alertname"] == "RagStageLatencySLOBreach"
    }
    assert stages == {"generate"}


def test_prometheus_scrapes_the_latency_and_cost_sent(
    start_sidecar: StartSidecar, services: Services
) -> None:
    """Prometheus's /api/v1/query returns per-stage latency and cost sums equal to those sent."""
    sidecar = start_sidecar()
    prometheus = services.start_prometheus(sidecar, render_rules(with_test_window(Config())))
    endpoint = f"http://127.0.0.1:{sidecar.http.port}/v1/traces"  # type: ignore[union-attr]
    provider, tracer = tracer_for(OTLPSpanExporter(endpoint=endpoint))
    sent = [
        replace(request, prompt_tokens=500 + 37 * i, completion_tokens=60 + 11 * i)
        for i, request in enumerate(requests_for(25))
    ]
    for request in sent:
        emit_rag_request(tracer, request)
    provider.shutdown()
    wait_until(lambda: sample(sidecar.registry, "rag_requests_total", source="otlp") == len(sent))

    def scraped_count(stage: str) -> float | None:
        return query_value(
            prometheus, f'rag_stage_latency_seconds_count{{job="{JOB}", stage="{stage}"}}'
        )

    wait_until(lambda: all(scraped_count(s) == len(sent) for s in STAGES), timeout=30, every=0.2)
    assert query_value(prometheus, f'up{{job="{JOB}"}}') == 1
    sums = query_series(
        prometheus, f'sum by (stage) (rag_stage_latency_seconds_sum{{job="{JOB}"}})'
    )
    for stage in STAGES:
        expected = sum(getattr(request, f"{stage}_s") for request in sent)
        assert sums[frozenset({("stage", stage)})] == pytest.approx(expected, rel=1e-9), stage
    assert query_value(prometheus, f'sum(rag_requests_total{{job="{JOB}"}})') == len(sent)
    expected_cost = sum(
        float(
            calc_price(
                PriceUsage(input_tokens=r.prompt_tokens, output_tokens=r.completion_tokens),
                r.model,
                provider_id="openai",
            ).total_price
        )
        for r in sent
    )
    assert query_value(prometheus, f'rag_request_cost_usd_count{{job="{JOB}"}}') == len(sent)
    cost = query_value(prometheus, f'rag_request_cost_usd_sum{{job="{JOB}"}}')
    assert cost == pytest.approx(expected_cost, rel=1e-9)
    by_model = query_value(prometheus, f'rag_cost_usd_total{{job="{JOB}", model="gpt-4o"}}')
    assert by_model == pytest.approx(expected_cost, rel=1e-9)
