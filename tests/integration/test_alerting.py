"""End to end: sidecar -> real Prometheus (scrape, generated rules) -> real Alertmanager -> webhook."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from alerts.rules import render_rules
from monitor.contract.config import Config
from monitor.runtime.sidecar import Sidecar
from tests.conftest import sample, wait_until
from tests.integration.conftest import (
    JOB,
    STAGES,
    TEST_WINDOW,
    Services,
    SteadyTraffic,
    query_series,
    requests_for,
    with_test_window,
)
from tests.otel_traffic import emit_rag_request, tracer_for

pytestmark = pytest.mark.integration

StartSidecar = Callable[..., Sidecar]
GENERATE_SLO_S = 0.5
RELEASE = {"service": "rag-service", "version": "2.0.0", "environment": ""}


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


def query_value(prometheus: str, promql: str) -> float | None:
    """The single value of ``promql`` (e.g. ``sum(rag_cost_usd_total)``); None if no series."""
    series = query_series(prometheus, promql)
    assert len(series) <= 1, series
    return next(iter(series.values()), None)


def latency_breach_config() -> Config:
    """Rules at this Prometheus's 1 s evaluation that page within seconds when the generate
    stage misses its SLO (95% within GENERATE_SLO_S): burn-rate windows of seconds."""
    return Config.model_validate(
        {
            "guardrails": {
                "evaluation_interval": "1s",
                "latency_slo": {"generate": {"objective": 0.95, "threshold_s": GENERATE_SLO_S}},
                "slo_windows": {"page": ["20s", "10s"], "ticket": ["40s", "20s"]},
                "window": TEST_WINDOW,
            }
        }
    )


# --- tests -----------------------------------------------------------------------------------


def test_slow_generate_stage_fires_then_resolves_at_the_webhook(
    start_sidecar: StartSidecar, services: Services, webhook: Webhook
) -> None:
    """Slow generate spans fire RagStageLatencySLOBreach at the webhook; fast ones resolve it.
    The spans carry no service.version: the suspected cause is drift."""
    sidecar = start_sidecar()
    config = latency_breach_config()
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
            "objective": "0.95",
        }
        assert (
            alert["annotations"]["runbook"]
            == "http://127.0.0.1:8000/alerts/#ragstagelatencyslobreach"
        )
    description = firing[0]["annotations"]["description"]
    assert "(95% of requests within 0.5s over 30d)" in description
    # the evidence the page rests on, read from the recording rules at evaluation
    assert re.search(r"Over the last 20s, 100% of \d+ generate requests", description), description
    assert firing[0]["annotations"]["suspected_cause"] == "drift"
    assert "Latest release: none reported." in firing[0]["annotations"]["description"]
    # only the stage with an SLO alerted, though every request was slow in total as well
    stages = {
        a["labels"]["stage"]
        for n in webhook.notifications
        for a in n["alerts"]
        if a["labels"]["alertname"] == "RagStageLatencySLOBreach"
    }
    assert stages == {"generate"}


def test_a_breach_right_after_a_new_version_reaches_the_webhook_as_regression(
    start_sidecar: StartSidecar, services: Services, webhook: Webhook
) -> None:
    """Slow spans of a service.version first seen moments ago fire with suspected_cause
    regression, and the description names the version and its first sight."""
    sidecar = start_sidecar()
    alertmanager = services.start_alertmanager(webhook.url)
    services.start_prometheus(sidecar, render_rules(latency_breach_config()), alertmanager)
    with SteadyTraffic(sidecar, generate_s=1.0, version="2.0.0"):
        firing = wait_until(
            lambda: webhook.alerts("RagStageLatencySLOBreach", "firing"), timeout=60, every=0.2
        )
    annotations = firing[0]["annotations"]
    assert annotations["suspected_cause"] == "regression"
    assert "Latest release: rag-service 2.0.0, first seen " in annotations["description"]
    assert sample(sidecar.registry, "rag_release_info", **RELEASE) == 1


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
