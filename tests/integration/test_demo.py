"""The demo: sidecar plus synthetic service, metrics visible while it runs, clean exit;
its live view in a terminal, and its JSON snapshots."""

from __future__ import annotations

import fcntl
import json
import os
import re
import select
import struct
import subprocess
import sys
import termios
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import REPO, free_port, wait_until
from tests.fake_hub import hub_environ

pytestmark = pytest.mark.integration


def demo_config(tmp_path: Path, metrics_port: int = 0, review_port: int = 0) -> Path:
    """A demo configuration on free ports (or these), its state and log under ``tmp_path``."""
    config = tmp_path / "demo.yaml"
    config.write_text(yaml.safe_dump({
        "service": {
            "metrics": {"port": metrics_port or free_port()},
            "state_dir": str(tmp_path / "state"),
        },
        "collectors": {"otlp": {"http": {"port": free_port()}, "grpc": {"port": free_port()}}},
        "detectors": {"review": {"http": {"port": review_port or free_port()}}},
    }))  # fmt: skip
    return config


def offline_environ(tmp_path: Path) -> dict[str, str]:
    """The environment of a demo that neither finds nor fetches a model: an empty Hugging
    Face cache under ``tmp_path`` and HF_HUB_OFFLINE, so that no test downloads the real
    HHEM model; the demo says so in one line before its view (its fetch is tested against
    a hub double in test_demo_fetch.py)."""
    return hub_environ(tmp_path, HF_HUB_OFFLINE="1")


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
    config = demo_config(tmp_path, metrics_port, review_port)
    process = subprocess.Popen(
        [sys.executable, "-m", "monitor", "demo", "--config", str(config), "--duration", "20"],
        cwd=REPO,
        env=offline_environ(tmp_path),
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
    assert b"demo_stopped" not in output  # the log goes to its file, not over the view
    assert "demo_stopped" in (tmp_path / "state" / "demo.log").read_text()


ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")
HOME = b"\x1b[H"


def run_in_terminal(
    argv: list[str],
    timeout: float,
    size: tuple[int, int] | None = None,
    env: dict[str, str] | None = None,
) -> tuple[int, bytes]:
    """Run ``argv`` with a pseudo-terminal as its stdin, stdout and stderr (of ``size``,
    columns x rows, when given; else one that reports no size); its exit status and
    every byte it wrote to the terminal."""
    controller, terminal = os.openpty()
    if size is not None:
        columns, rows = size
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    process = subprocess.Popen(
        argv, cwd=REPO, env=env, stdin=terminal, stdout=terminal, stderr=terminal, close_fds=True
    )
    os.close(terminal)
    written = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([controller], [], [], 1.0)[0]:
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: the process closed the terminal's last descriptor
                break
            if not chunk:
                break
            written += chunk
        return process.wait(timeout=30), bytes(written)
    finally:
        os.close(controller)
        if process.poll() is None:
            process.kill()


def screens(written: bytes) -> list[str]:
    """What the terminal shows after each redraw (each frame starts at the home
    position), as plain text."""
    return [ANSI.sub(b"", frame).decode() for frame in written.split(HOME)[1:]]


def test_demo_in_a_terminal_shows_guardrails_and_incident_without_log_lines(
    tmp_path: Path,
) -> None:
    """`rag-monitor demo --duration N` in a pseudo-terminal redraws a screen with a row
    per guardrail and the incident running now with the alert it should fire, then when
    its condition was met, and no JSON log line anywhere on the terminal: the log is in
    the state directory's demo.log."""
    from demo.view import GUARDRAILS

    config = demo_config(tmp_path)
    argv = [sys.executable, "-m", "monitor", "demo", "--config", str(config), "--duration", "20"]
    status, written = run_in_terminal(argv, timeout=90, env=offline_environ(tmp_path))
    frames = screens(written)
    assert status == 0, written.decode(errors="replace")[-3000:]
    assert len(frames) >= 15  # a redraw a second
    # The one line on the missing model first, then the screen erased once, then each frame.
    before, board = written.split(b"\x1b[2J", 1)
    assert before.startswith(b"model missing: faithfulness needs ")
    assert before.count(b"\n") == 1
    assert board.startswith(b"\x1b[H")
    assert b"\x1b[2J" not in board
    last = frames[-1].splitlines()
    for guardrail in GUARDRAILS:
        assert sum(line.startswith(guardrail.name + " ") for line in last) == 1, guardrail
    assert any(line.startswith("evaluated by Prometheus only: ") for line in last)
    log = tmp_path / "state" / "demo.log"
    assert f"log: {log}" in frames[-1]
    # The latency incident runs from 20% to 40% of the 20 s cycle.
    assert any(
        "incident now: slow generate stage (0:04-0:08) -> RagStageLatencySLOBreach should fire"
        in frame
        for frame in frames
    )
    met = re.compile(r"slow generate stage.* -> RagStageLatencySLOBreach.* met at \d:\d\d")
    assert any(met.search(frame) for frame in frames)
    assert not [line for line in ANSI.sub(b"", written).splitlines() if b'{"' in line]
    assert '"event": "demo_stopped"' in log.read_text()


def test_demo_json_prints_one_snapshot_per_refresh(tmp_path: Path) -> None:
    """`rag-monitor demo --json` prints only JSON objects on stdout, one per refresh, each
    with the five guardrails, the release and the links; on stderr only the line saying the
    model is missing."""
    from demo.view import GUARDRAILS

    config = demo_config(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "monitor", "demo", "--config", str(config), "--duration", "6",
         "--json"],
        cwd=REPO,
        env=offline_environ(tmp_path),
        capture_output=True,
        timeout=90,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    [missing] = done.stderr.decode().splitlines()  # the one line on the model, nothing else
    assert missing.startswith("model missing: faithfulness needs ")
    snapshots: list[dict[str, Any]] = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(snapshots) == 1  # one refresh every 10 s without a terminal, and one at the end
    [snapshot] = snapshots
    rows = snapshot["guardrails"]
    assert [row["guardrail"] for row in rows] == [
        "faithfulness", "latency SLO total", "false exclusion", "regeneration", "cost per query"
    ]  # fmt: skip
    assert {row["alert"].split("{")[0] for row in rows} == {g.alert for g in GUARDRAILS}
    cost = rows[-1]
    assert (cost["op"], cost["threshold"]) == (">", 0.02)
    assert cost["evidence"] > 0
    assert cost["value"] > 0
    assert snapshot["release"] == "1.5.0"
    assert snapshot["requests"] > 0
    assert "RagRegenerationRateAnomalous" in snapshot["prometheus_only"]
    assert snapshot["links"]["metrics"].endswith("/metrics")
