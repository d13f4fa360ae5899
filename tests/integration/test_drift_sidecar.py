"""Drift through the running sidecar: real OTLP/HTTP exporter, EMBEDDING spans, /metrics gauge."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.runtime.sidecar import Sidecar
from tests.conftest import sample, state_bytes, wait_until
from tests.integration.conftest import send_query_vectors

pytestmark = pytest.mark.integration

DIM = 16
SIGNAL = "query_embedding"


def drift_tests_run(registry: SidecarRegistry) -> float:
    return sum(
        sample(registry, "rag_drift_tests_total", signal=SIGNAL, outcome=outcome)
        for outcome in ("drift", "no_drift")
    )


@pytest.mark.parametrize("backend", ["scipy", "alibi"])
def test_drift_gauge_is_0_on_reference_traffic_and_1_after_a_shift(
    backend: str, tmp_path: Path, start_sidecar: Callable[..., Sidecar]
) -> None:
    """rag_drift_detected is absent before the first test, reads 0 for reference-like traffic
    and 1 after a query-mix shift."""
    sidecar = start_sidecar(
        service={"state_dir": str(tmp_path)},
        detectors={
            "drift": {
                "backend": backend,
                "reference_size": 150,
                "window_size": 100,
                "test_every_records": 100,
                "p_value": 0.01,
                "n_permutations": 100,
            }
        },
    )
    assert sidecar.http is not None
    rng = np.random.default_rng(17)
    registry = sidecar.registry
    send_query_vectors(sidecar.http.port, rng.normal(size=(150, DIM)), "billing")
    wait_until(lambda: sample(registry, "rag_drift_reference_vectors", signal=SIGNAL) == 150)
    assert registry.get_sample_value("rag_drift_detected", {"signal": SIGNAL}) is None
    assert registry.get_sample_value("rag_drift_p_value", {"signal": SIGNAL}) is None

    send_query_vectors(sidecar.http.port, rng.normal(size=(100, DIM)), "billing")
    wait_until(
        lambda: sample(registry, "rag_drift_tests_total", signal=SIGNAL, outcome="no_drift"),
        timeout=90,
    )
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 0
    assert sample(registry, "rag_drift_last_test_timestamp_seconds", signal=SIGNAL) > 0

    shifted = rng.normal(size=(100, DIM))
    shifted[:, :4] += 1.5  # a new topic: four directions move by 1.5 sd
    send_query_vectors(sidecar.http.port, shifted, "shipping")
    wait_until(
        lambda: sample(registry, "rag_drift_tests_total", signal=SIGNAL, outcome="drift"),
        timeout=90,
    )
    assert sample(registry, "rag_drift_detected", signal=SIGNAL) == 1
    assert sample(registry, "rag_drift_p_value", signal=SIGNAL) < 0.01
    assert sample(registry, "rag_drift_mmd_statistic", signal=SIGNAL) > 0
    assert (tmp_path / "drift.sqlite3").exists()


class FileSizes:
    """Polls the drift files' total size in a thread: the largest it saw, writes included."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.largest = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            total = 0
            for path in self.directory.glob("drift.sqlite3*"):
                with contextlib.suppress(FileNotFoundError):
                    total += path.stat().st_size
            self.largest = max(self.largest, total)
            self._stop.wait(0.001)

    def __enter__(self) -> FileSizes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.mark.parametrize(
    ("budget", "pruned"), [(400_000, True), (4_000_000, False)], ids=["small", "roomy"]
)
def test_state_stays_under_state_max_bytes_while_windows_are_tested(
    budget: int, pruned: bool, tmp_path: Path, start_sidecar: Callable[..., Sidecar]
) -> None:
    """With a budget below what an hour of history takes, the drift files never pass
    service.state_max_bytes, writes included: the oldest samples make room and every test
    record stays. The roomy budget shows the same traffic takes more than the small one."""
    dim, tests = 256, 39
    sidecar = start_sidecar(
        service={"state_dir": str(tmp_path), "state_max_bytes": budget},
        detectors={
            "drift": {
                "reference_size": 30,
                "window_size": 10,
                "test_every_records": 5,
                "n_permutations": 20,
            }
        },
    )
    assert sidecar.http is not None
    rng = np.random.default_rng(23)
    registry = sidecar.registry
    with FileSizes(tmp_path) as sizes:
        send_query_vectors(sidecar.http.port, rng.normal(size=(30 + 10, dim)), "first")
        for tested in range(2, tests + 1):
            send_query_vectors(sidecar.http.port, rng.normal(size=(5, dim)), "more")
            wait_until(lambda tested=tested: drift_tests_run(registry) >= tested, timeout=60)
    assert sample(registry, "rag_monitor_state_max_bytes") == budget
    assert 0 < state_bytes(registry) <= budget

    from detectors.drift.database import SAMPLES_PER_HOUR
    from detectors.drift.store import DriftStore

    store = DriftStore(tmp_path, create=False)
    kept = len(store.samples(0)[0])
    assert len(store.tests(0)) == tests
    store.close()
    if pruned:
        assert sizes.largest <= budget
        assert 0 < kept < SAMPLES_PER_HOUR  # 39 tests offered 5 vectors each: 195
    else:
        assert sizes.largest > 400_000  # what the small budget had to hold back
        assert kept == SAMPLES_PER_HOUR
