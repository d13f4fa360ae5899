"""A collector from a third-party package: registered by an entry point with a config
section of its own, it appears in ``check-config --explain`` and ``/metrics`` and feeds the
pipeline, and adds its alert and panel, without edits outside its package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SidecarProcess, wait_until

TOY = Path(__file__).resolve().parents[1] / "testdata" / "toy_collector"


@pytest.fixture
def toy_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy package and its dist-info (the entry point) on the path of every subprocess."""
    path = os.pathsep.join(p for p in (str(TOY), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)


def _monitor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.usefixtures("toy_on_path")
def test_the_toy_section_is_explained_and_validated_with_its_key_path(tmp_path: Path) -> None:
    """--explain lists collectors.toy_file.*; a bad value is refused naming that key."""
    explained = _monitor("check-config", "--explain")
    assert explained.returncode == 0, explained.stderr
    assert "collectors.toy_file.path: None  # the file to tail" in explained.stdout
    config = tmp_path / "c.yaml"
    config.write_text("collectors: {toy_file: {poll_s: 0}}\n")
    refused = _monitor("check-config", str(config))
    assert refused.returncode == 1
    assert "collectors.toy_file.poll_s" in refused.stderr


@pytest.mark.usefixtures("toy_on_path")
@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("rules", "alert: RagToyFileInvalidLines"),
        ("dashboard", '"title": "Toy file lines per second"'),
    ],
    ids=["rules", "dashboard"],
)
def test_the_toy_adds_its_alert_and_panel(command: str, expected: str) -> None:
    """rag-monitor rules lists its alert, the dashboard its panel."""
    generated = _monitor(command)
    assert generated.returncode == 0, generated.stderr
    assert expected in generated.stdout


@pytest.mark.usefixtures("toy_on_path")
def test_a_running_sidecar_reads_through_the_toy(
    tmp_path: Path, sidecar_process: Callable[..., SidecarProcess]
) -> None:
    """A request the toy reads from its file reaches the pipeline; its metric counts each
    line, those that are no request as invalid."""
    request = {
        "trace_id": "0af7651916cd43dd8448eb211c80319c",
        "time": "2026-12-07T10:00:00Z",
        "query": "How long is the warranty?",
        "answer": "Two years.",
        "contexts": [{"doc_id": "warranty", "text": "The warranty lasts two years."}],
        "stages": {"total": 0.4},
    }
    traces = tmp_path / "traces.jsonl"
    traces.write_bytes(b"")
    sidecar = sidecar_process({"collectors": {"toy_file": {"path": str(traces)}}}).start()
    sidecar.wait_ready()
    assert b"rag_toy_file_lines_total" in sidecar.get("/metrics")[1]
    with traces.open("ab") as out:
        out.write(json.dumps(request).encode() + b"\n")
        out.write(b"not json\n")
        out.write(b'{"trace_id": "no time"}\n')
    wait_until(lambda: sidecar.metric("rag_toy_file_lines_total", outcome="invalid") == 2.0)
    assert sidecar.metric("rag_toy_file_lines_total", outcome="ok") == 1.0
    wait_until(lambda: sidecar.metric("rag_requests_total", source="otlp") == 1.0)
