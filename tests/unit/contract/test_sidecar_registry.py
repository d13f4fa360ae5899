"""What the components of one sidecar share lives in its registry, and only there."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import Counter, Gauge

from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.worker import Worker


def test_a_family_is_registered_once_and_handed_out_again() -> None:
    """Two components asking for the same family get the one registered object."""
    registry = SidecarRegistry()
    first = registry.family(Counter, "rag_test_shared_total", "A test family.", ["detector"])
    second = registry.family(Counter, "rag_test_shared_total", "A test family.", ["detector"])
    assert first is second
    first.labels("a").inc()
    second.labels("b").inc(2)
    assert registry.get_sample_value("rag_test_shared_total", {"detector": "a"}) == 1
    assert registry.get_sample_value("rag_test_shared_total", {"detector": "b"}) == 2


def test_two_sidecars_in_one_process_share_nothing(tmp_path: Path) -> None:
    """Each registry has its own families, budgets, state directory and supervisor: what one
    sidecar counts, runs or writes never shows in the other."""
    one, other = SidecarRegistry(), SidecarRegistry()
    one.family(Gauge, "rag_test_depth", "A test gauge.", ["queue"]).labels("q").set(3)
    other.family(Gauge, "rag_test_depth", "A test gauge.", ["queue"]).labels("q").set(5)
    assert one.get_sample_value("rag_test_depth", {"queue": "q"}) == 3
    assert other.get_sample_value("rag_test_depth", {"queue": "q"}) == 5

    assert one.budget("otlp", 100) is not other.budget("otlp", 100)
    one.budget("otlp", 100).admit(40)
    assert one.get_sample_value("rag_monitor_inflight_bytes", {"budget": "otlp"}) == 40
    assert other.get_sample_value("rag_monitor_inflight_bytes", {"budget": "otlp"}) == 0

    assert one.state_dir(tmp_path / "one", 10) is one.state_dir(tmp_path / "one", 10)
    assert other.state_dir(tmp_path / "other", 20).path == tmp_path / "other"
    assert one.get_sample_value("rag_monitor_state_max_bytes") == 10
    assert other.get_sample_value("rag_monitor_state_max_bytes") == 20

    worker: Worker[int] = Worker(
        "doomed",
        handle=lambda batch: 1 / 0,
        supervisor=one.supervisor,  # type: ignore[func-returns-value]
    )
    worker.start()
    assert worker.submit(1)
    worker.stop()
    assert one.supervisor.failing() == {"doomed": "dead"}
    assert other.supervisor.failing() == {}
    assert one.get_sample_value("rag_monitor_worker_up", {"worker": "doomed"}) == 0
    assert other.get_sample_value("rag_monitor_worker_up", {"worker": "doomed"}) is None
