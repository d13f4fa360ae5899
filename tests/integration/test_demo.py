"""The demo: sidecar plus synthetic service, metrics visible while it runs, clean exit."""

from __future__ import annotations

import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, free_port, wait_until

pytestmark = pytest.mark.integration


def scrape(port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            totals[s.name] = totals.get(s.name, 0.0) + s.value
    return totals


def test_demo_serves_traffic_latency_and_cost_then_exits_0(tmp_path: Path) -> None:
    """`rag-monitor demo --duration` shows requests, latency and cost on /metrics and exits 0."""
    metrics_port = free_port()
    config = tmp_path / "demo.yaml"
    config.write_text(yaml.safe_dump({
        "service": {"metrics": {"port": metrics_port}, "state_dir": str(tmp_path / "state")},
        "collectors": {"otlp": {"http": {"port": free_port()}, "grpc": {"port": free_port()}}},
    }))  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "monitor", "demo", "--config", str(config), "--duration", "20"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        seen = wait_until(
            lambda: (m := scrape(metrics_port)).get("rag_request_cost_usd_count", 0) > 20 and m,
            timeout=30,
            every=0.5,
        )
        assert seen["rag_requests_total"] > 20
        assert seen["rag_stage_latency_seconds_count"] > 0
        assert seen["rag_request_cost_usd_sum"] > 0
        assert seen.get("rag_stage_latency_window_seconds", 0) > 0
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output.decode()[-2000:]
    assert b"demo_stopped" in output
