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


STRATA = {"random", "thumbs_down", "follow_up"}


def scrape_by(port: int, name: str, label: str) -> dict[str, float]:
    """The samples ``name`` summed per value of ``label``, values with a total above 0 only."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                totals[s.labels[label]] = totals.get(s.labels[label], 0.0) + s.value
    return {value: total for value, total in totals.items() if total > 0}


def scrape_by_stratum(port: int) -> dict[str, float]:
    """``rag_review_sampled_total`` per stratum, strata with a sample above 0 only."""
    return scrape_by(port, "rag_review_sampled_total", "stratum")


def test_demo_serves_traffic_latency_and_cost_then_exits_0(tmp_path: Path) -> None:
    """`rag-monitor demo --duration` shows requests, latency and cost on /metrics, fills the
    review queue (random, thumbs-down and follow-up items) behind its page, releases 1.5.0
    when its latency incident starts, sends shadow twins and slices, and exits 0."""
    metrics_port, review_port = free_port(), free_port()
    config = tmp_path / "demo.yaml"
    config.write_text(yaml.safe_dump({
        "service": {"metrics": {"port": metrics_port}, "state_dir": str(tmp_path / "state")},
        "collectors": {"otlp": {"http": {"port": free_port()}, "grpc": {"port": free_port()}}},
        "detectors": {"review": {"http": {"port": review_port}}},
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
        sampled = wait_until(
            lambda: (m := scrape_by_stratum(metrics_port)).keys() >= STRATA and m,
            timeout=30,
            every=0.5,
        )
        assert all(sampled[stratum] > 0 for stratum in STRATA)
        with urllib.request.urlopen(f"http://127.0.0.1:{review_port}/review", timeout=5) as page:
            assert b"<form" in page.read()
        # The scripted release: 1.4.0 first, 1.5.0 once the latency incident starts (4 s in).
        versions = wait_until(
            lambda: (
                (v := scrape_by(metrics_port, "rag_release_info", "version")).keys()
                >= {"1.4.0", "1.5.0"}
                and v
            ),
            timeout=30,
            every=0.5,
        )
        assert set(versions) == {"1.4.0", "1.5.0"}
        first_seen = scrape_by(metrics_port, "rag_release_first_seen_timestamp_seconds", "version")
        assert first_seen["1.5.0"] > first_seen["1.4.0"]
        # Shadow twins: about a fifth of the requests, as their own variant.
        variants = scrape_by(metrics_port, "rag_requests_total", "variant")
        assert set(variants) == {"production", "shadow"}
        assert 0.1 < variants["shadow"] / variants["production"] < 0.3
        shadow_latency = scrape_by(metrics_port, "rag_stage_latency_seconds_count", "variant")
        assert shadow_latency["shadow"] > 0
        # Slices: the demo's four intents, and document types from the context metadata.
        intents = scrape_by(metrics_port, "rag_slice_requests_total", "intent")
        assert set(intents) == {"billing", "shipping", "returns", "account"}
        cells = scrape_by(metrics_port, "rag_coverage_requests_total", "document_type")
        assert set(cells) == {"application/pdf", "text/html", "text/markdown"}
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, output.decode()[-2000:]
    assert b"demo_stopped" in output
