"""A detector from a third-party package: registered by an entry point, it appears in the
configuration, /metrics, the rules and the dashboard without edits outside its package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import SidecarProcess, free_port, wait_until

TOY = Path(__file__).resolve().parents[1] / "testdata" / "toy_detector"


@pytest.fixture
def toy_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """The toy package and its dist-info (the entry point) on the path of every subprocess."""
    path = os.pathsep.join(p for p in (str(TOY), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)


def _cli(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "monitor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.usefixtures("toy_on_path")
@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("check-config", "--explain"), "detectors.toy.max_events_per_second: 100.0  # alert when"),
        (("rules",), "alert: RagToyEventsTooFast"),
        (("dashboard",), '"title": "Toy events per second"'),
    ],
    ids=["check-config", "rules", "dashboard"],
)
def test_the_toy_appears_in_the_commands(args: tuple[str, ...], expected: str) -> None:
    """check-config --explain lists its key, rules its alert, the dashboard its panel."""
    assert expected in _cli(*args)


@pytest.mark.usefixtures("toy_on_path")
def test_the_toy_section_is_validated_with_its_key_path(tmp_path: Path) -> None:
    """A bad value in the toy's own section is refused naming detectors.toy.<key>."""
    config = tmp_path / "c.yaml"
    config.write_text("detectors: {toy: {max_events_per_second: 0}}\n")
    result = subprocess.run(
        [sys.executable, "-m", "monitor", "check-config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 1
    assert "detectors.toy.max_events_per_second" in result.stderr


@pytest.mark.usefixtures("toy_on_path")
def test_a_running_sidecar_builds_the_toy(
    sidecar_process: Callable[..., SidecarProcess],
) -> None:
    """The sidecar builds the toy from the registry: its metric counts a posted feedback event."""
    http_port = free_port()
    sidecar = sidecar_process({"collectors": {"otlp": {"http": {"port": http_port}}}}).start()
    sidecar.wait_ready()
    assert b"rag_toy_events_total 0.0" in sidecar.get("/metrics")[1]
    request = urllib.request.Request(
        f"http://127.0.0.1:{http_port}/v1/feedback",
        data=json.dumps({"trace_id": "ab12", "kind": "thumbs_up"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200
    wait_until(lambda: sidecar.metric("rag_toy_events_total") == 1.0)
