"""The supervised worker: drain with a deadline, counted drops, crash marking, heartbeat."""

from __future__ import annotations

import threading
import time

import pytest
from structlog.testing import capture_logs

from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.worker import Worker
from tests.conftest import sample, wait_until


def test_stop_handles_what_is_queued_then_refuses_intake() -> None:
    """Items queued before stop are all handled in order; after stop, submit and offer refuse."""
    gate = threading.Event()
    seen: list[int] = []

    def handle(batch: list[int]) -> None:
        gate.wait(5)
        seen.extend(batch)

    worker: Worker[int] = Worker("w", handle=handle, queue_size=10, drain_s=5)
    worker.start()
    for i in range(5):
        assert worker.submit(i, timeout=1)
    gate.set()
    worker.stop()
    assert seen == [0, 1, 2, 3, 4]
    assert worker.dropped == 0
    assert worker.state == "stopped"
    assert worker.submit(9, timeout=0) is False
    assert worker.offer(9) is False


def test_items_left_at_the_drain_deadline_are_dropped_and_counted() -> None:
    """A drain that outlasts drain_s stops there; what is left is counted dropped, once."""
    registry = SidecarRegistry()
    seen: list[int] = []

    def handle(batch: list[int]) -> None:
        seen.extend(batch)
        time.sleep(0.3)

    worker: Worker[int] = Worker(
        "slow", handle=handle, queue_size=10, drain_s=0.15, supervisor=registry.supervisor
    )
    for i in range(6):
        assert worker.offer(i)  # queued before start: handled once it runs
    worker.start()
    worker.stop()
    worker.stop()
    assert seen == [0]
    assert worker.dropped == 5
    assert sample(registry, "rag_monitor_worker_dropped_total", worker="slow") == 5
    assert worker.depth == 0


def test_a_full_queue_times_out_submit_and_refuses_offer() -> None:
    """With the queue full, submit returns False after its timeout and offer at once."""
    worker: Worker[int] = Worker("w", handle=lambda batch: None, queue_size=1)
    assert worker.submit(1, timeout=0)
    started = time.monotonic()
    assert worker.submit(2, timeout=0.1) is False
    assert 0.1 <= time.monotonic() - started < 1.0
    assert worker.offer(3) is False
    assert worker.depth == 1


def test_batches_take_up_to_batch_size() -> None:
    """A queue worker hands over at most batch_size items per call, in order."""
    batches: list[list[int]] = []
    worker: Worker[int] = Worker("w", handle=batches.append, batch_size=3)
    for i in range(7):
        worker.offer(i)
    worker.start()
    worker.stop()
    assert batches == [[0, 1, 2], [3, 4, 5], [6]]


@pytest.mark.parametrize(
    "error", [RuntimeError("bug"), SystemExit(3)], ids=["exception", "system_exit"]
)
def test_an_escaping_exception_marks_the_worker_dead_and_is_logged_once(
    error: BaseException,
) -> None:
    """The body's exception ends the thread, logs worker_failed once, runs finish, reports the
    worker dead (up 0), and later submits refuse; stop then counts what is left."""
    registry = SidecarRegistry()
    finished = threading.Event()

    def handle(batch: list[int]) -> None:
        raise error

    worker: Worker[int] = Worker(
        "doomed", handle=handle, finish=finished.set, batch_size=1, supervisor=registry.supervisor
    )
    with capture_logs() as logs:
        worker.offer(1)
        worker.offer(2)
        worker.start()
        wait_until(lambda: worker.state == "dead", timeout=5)
        assert finished.wait(5)
        assert worker.submit(3, timeout=None) is False
        worker.stop()
    assert [(e["event"], e["worker"], e["log_level"]) for e in logs] == [
        ("worker_failed", "doomed", "error"),
        ("worker_dropped", "doomed", "warning"),
    ]
    assert worker.problem() == "dead"
    assert registry.supervisor.failing() == {"doomed": "dead"}
    assert sample(registry, "rag_monitor_worker_up", worker="doomed") == 0
    assert worker.dropped == 1


def test_a_step_worker_repeats_its_step_until_stopped() -> None:
    """Without a queue, step runs again and again; after stop it runs no more."""
    turns: list[int] = []

    def step() -> None:
        turns.append(1)
        time.sleep(0.01)

    worker: Worker[None] = Worker("loop", step=step)
    worker.start()
    wait_until(lambda: len(turns) >= 3, timeout=5)
    worker.stop()
    after = len(turns)
    time.sleep(0.05)
    assert len(turns) == after
    assert worker.state == "stopped"
    assert worker.problem() is None


def test_a_missed_heartbeat_is_a_stall_until_the_body_returns() -> None:
    """A body stuck past stall_after_s makes the worker stalled (up 0, failing); it recovers
    when the body returns."""
    registry = SidecarRegistry()
    release = threading.Event()

    def step() -> None:
        release.wait(5)

    worker: Worker[None] = Worker(
        "stuck", step=step, stall_after_s=0.2, supervisor=registry.supervisor
    )
    worker.start()
    wait_until(lambda: worker.problem() == "stalled", timeout=5)
    assert registry.supervisor.failing() == {"stuck": "stalled"}
    assert sample(registry, "rag_monitor_worker_up", worker="stuck") == 0
    assert not worker.alive()
    release.set()
    wait_until(lambda: worker.problem() is None, timeout=5)
    assert sample(registry, "rag_monitor_worker_up", worker="stuck") == 1
    worker.stop()


def test_pause_keeps_the_heartbeat_and_ends_at_stop() -> None:
    """A backoff through pause is no stall, and stop cuts it short."""
    paused = threading.Event()

    def step() -> None:
        paused.set()
        worker.pause(30)

    worker: Worker[None] = Worker("backoff", step=step, tick_s=0.02, stall_after_s=0.2)
    worker.start()
    assert paused.wait(5)
    time.sleep(0.4)
    assert worker.problem() is None
    started = time.monotonic()
    worker.stop()
    assert time.monotonic() - started < 1.0


def test_stop_returns_when_the_thread_is_stuck() -> None:
    """stop waits stop_timeout_s at most, logs it, and counts the queue as dropped."""
    release = threading.Event()

    def handle(batch: list[int]) -> None:
        release.wait(5)

    worker: Worker[int] = Worker("wedged", handle=handle, drain_s=0.0, stop_timeout_s=0.2)
    worker.offer(1)
    worker.offer(2)
    worker.start()
    wait_until(lambda: worker.depth == 1, timeout=5)
    with capture_logs() as logs:
        started = time.monotonic()
        worker.stop()
        assert time.monotonic() - started < 1.0
    release.set()
    assert [e["event"] for e in logs] == ["worker_stop_timeout", "worker_dropped"]
    assert worker.dropped == 1


def test_setup_returning_false_ends_the_worker_without_a_failure() -> None:
    """A worker whose setup declines (no model) stops on its own: not dead, intake closed."""
    registry = SidecarRegistry()
    worker: Worker[int] = Worker(
        "declined", handle=lambda batch: None, setup=lambda: False, supervisor=registry.supervisor
    )
    worker.start()
    wait_until(lambda: worker.state == "stopped", timeout=5)
    assert worker.problem() is None
    assert worker.offer(1) is False
    assert registry.supervisor.failing() == {}
    worker.stop()


def test_stop_is_safe_before_start_and_twice() -> None:
    """stop before start does nothing (start still works); a second stop does nothing."""
    seen: list[int] = []
    worker: Worker[int] = Worker("w", handle=seen.extend)
    worker.stop()
    before_start = worker.state
    worker.offer(1)
    worker.start()
    worker.stop()
    worker.stop()
    assert seen == [1]
    assert (before_start, worker.state) == ("new", "stopped")


def test_a_worker_takes_exactly_one_body() -> None:
    """Both handle and step, or neither, is refused at construction."""
    with pytest.raises(ValueError, match="exactly one of handle"):
        Worker("w")
    with pytest.raises(ValueError, match="exactly one of handle"):
        Worker("w", handle=lambda batch: None, step=lambda: None)
