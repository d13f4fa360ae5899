"""Storage faults under the running sidecar (``rag-monitor run``) with drift on.

A state_dir under a regular file, a read-only mount, a full disk and a corrupt
drift.sqlite3: traces posted after the fault are processed, drift tests go on
from memory, the failure is counted in rag_monitor_state_write_errors_total and
logged once as one JSON line, /healthz stays 200 (the drift worker lives), and
SIGTERM ends the process with exit code 0 without a SIGKILL.

The read-only and full variants mount a small tmpfs (root or CAP_SYS_ADMIN); they
are skipped, saying so, where mounting is not permitted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from detectors.drift.store import DriftStore
from tests.conftest import SidecarProcess, wait_until
from tests.integration.conftest import fill, log_events, send_query_vectors, tmpfs

pytestmark = pytest.mark.integration

MakeProcess = Callable[..., SidecarProcess]
DIM = 8
REFERENCE, WINDOW = 40, 20
DRIFT = {
    "backend": "scipy",
    "reference_size": REFERENCE,
    "window_size": WINDOW,
    "test_every_records": WINDOW,
    "n_permutations": 50,
}
GRACE_S = 30  # terminationGracePeriodSeconds of deploy/kubernetes/deployment.yaml


def otlp_port(process: SidecarProcess) -> int:
    config = yaml.safe_load(process.config_path.read_text())
    return int(config["collectors"]["otlp"]["http"]["port"])


def drift_tests_run(process: SidecarProcess) -> float:
    return process.metric("rag_drift_tests_total")


def run_through_fault(
    make: MakeProcess, state_dir: Path, reason: str
) -> tuple[SidecarProcess, list[dict[str, Any]]]:
    """Start with drift on over ``state_dir``; traffic before and after the fault is seen;
    SIGTERM exits 0 within the grace period. The process and its log events."""
    process = make({"service": {"state_dir": str(state_dir)}, "detectors": {"drift": DRIFT}})
    process.start().wait_ready()
    port = otlp_port(process)
    rng = np.random.default_rng(3)
    send_query_vectors(port, rng.normal(size=(REFERENCE + WINDOW, DIM)), "before")
    wait_until(lambda: drift_tests_run(process) >= 1, timeout=60)
    errors = process.metric("rag_monitor_state_write_errors_total", reason=reason)
    assert errors >= 1

    send_query_vectors(port, rng.normal(size=(2 * WINDOW, DIM)), "after")  # after the fault
    sent = REFERENCE + 3 * WINDOW
    wait_until(lambda: process.metric("rag_requests_total", source="otlp") == sent, timeout=60)
    wait_until(lambda: drift_tests_run(process) >= 3, timeout=60)
    assert process.get("/healthz")[0] == 200
    assert process.metric("rag_monitor_worker_up", worker="drift") == 1

    started = time.monotonic()
    assert process.stop() == 0
    assert time.monotonic() - started < GRACE_S
    return process, log_events(process)


def failures(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["file"], e["reason"]) for e in events if e["event"] == "state_write_failed"]


def test_state_dir_under_a_regular_file(tmp_path: Path, sidecar_process: MakeProcess) -> None:
    """state_dir runs through a regular file: not_a_directory, counted, one log line."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the state directory should be")
    _, events = run_through_fault(sidecar_process, blocker / "state", "not_a_directory")
    assert failures(events) == [("drift.sqlite3", "not_a_directory")]


def test_read_only_state_dir(tmp_path: Path, sidecar_process: MakeProcess) -> None:
    """A read-only mount (root writes through chmod, not through ro): read_only, one line."""
    with tmpfs(tmp_path / "ro", "ro,size=1m") as state_dir:
        _, events = run_through_fault(sidecar_process, state_dir, "read_only")
    assert failures(events) == [("drift.sqlite3", "read_only")]


def test_full_disk(tmp_path: Path, sidecar_process: MakeProcess) -> None:
    """A 256 KiB tmpfs filled to the last byte: disk_full, counted, one log line."""
    with tmpfs(tmp_path / "full", "size=256k") as mountpoint:
        state_dir = mountpoint / "state"
        state_dir.mkdir()
        fill(mountpoint)
        _, events = run_through_fault(sidecar_process, state_dir, "disk_full")
    assert failures(events) == [("drift.sqlite3", "disk_full")]


def test_corrupt_state_file(tmp_path: Path, sidecar_process: MakeProcess) -> None:
    """Garbage in drift.sqlite3 before the start: moved aside with a timestamp suffix (one
    error line naming both paths), a new file holds the reference and the tests."""
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    garbage = bytes(np.random.default_rng(9).integers(0, 256, 16384, dtype=np.uint8))
    (state_dir / "drift.sqlite3").write_bytes(garbage)
    process, events = run_through_fault(sidecar_process, state_dir, "corrupt")
    assert process.process is not None
    moved = [e for e in events if e["event"] == "state_file_moved_aside"]
    assert len(moved) == 1
    assert moved[0]["path"] == str(state_dir / "drift.sqlite3")
    aside = Path(moved[0]["moved_to"])
    assert aside.parent == state_dir
    assert aside.name.startswith("drift.sqlite3.corrupt-")
    assert aside.read_bytes() == garbage
    assert failures(events) == []  # the new file was written from then on
    store = DriftStore(state_dir, create=False)
    assert len(store.tests(0)) >= 3
    assert store.reference() is not None
    store.close()
