"""One supervised background thread: the lifecycle every worker of the sidecar shares.

A worker either takes batches from a bounded queue and hands them to
``handle`` (the pipeline, the drift and HHEM workers, the Phoenix annotator),
or, without a queue, calls ``step`` again and again (the Kafka poll loop).

- ``start`` runs ``setup`` (if any) on the new thread, then the loop; ``setup``
  returning False ends the worker on purpose (a missing model), not a crash.
- ``stop`` closes intake (``submit`` and ``offer`` refuse), lets the thread take
  what is queued without waiting until the queue is empty or ``drain_s`` has
  passed, runs ``finish`` on the thread, and counts what is left as dropped.
  It waits ``stop_timeout_s`` at most, so it returns even when the thread is
  stuck, dead, or its queue is full. Safe before ``start`` and twice.
- Each loop turn updates a heartbeat; a running worker whose heartbeat is older
  than ``stall_after_s`` is stalled. A body that waits on purpose (a backoff)
  uses ``pause``, which keeps the heartbeat fresh.
- An exception escaping the body (``BaseException`` included: a ``SystemExit``
  would otherwise end the thread silently) ends the thread, is logged once and
  marks the worker dead; ``finish`` still runs.

Started workers report to their sidecar's ``Supervisor`` (``SidecarRegistry.supervisor``),
which answers ``/healthz`` and exports ``rag_monitor_worker_up`` and
``rag_monitor_worker_dropped_total``.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Generic, Literal, TypeVar

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from monitor.contract.names import WORKER_DROPPED_TOTAL, WORKER_UP

log = structlog.get_logger("rag_monitor.worker")

T = TypeVar("T")
WorkerState = Literal["new", "starting", "running", "stopping", "stopped", "dead"]
Problem = Literal["dead", "stalled"]
_STARTED: tuple[WorkerState, ...] = ("starting", "running", "stopping")

# A stall is many missed turns, never a slow one: liveness probes restart the pod.
STALL_TICKS = 10
MIN_STALL_S = 10.0
JOIN_MARGIN_S = 5.0


class Worker(Generic[T]):
    """A background thread with a bounded queue (or a repeated step), a stop with a
    drain deadline, a heartbeat and a defined crash."""

    def __init__(
        self,
        name: str,
        *,
        handle: Callable[[list[T]], None] | None = None,
        step: Callable[[], None] | None = None,
        source: queue.Queue[T] | None = None,
        queue_size: int = 10_000,
        batch_size: int = 1,
        batch_wait_s: float = 0.0,
        tick_s: float = 0.05,
        on_tick: Callable[[], None] | None = None,
        setup: Callable[[], bool] | None = None,
        finish: Callable[[], None] | None = None,
        drain_s: float = 10.0,
        stop_timeout_s: float | None = None,
        stall_after_s: float | None = None,
        supervisor: Supervisor | None = None,
    ) -> None:
        if (handle is None) == (step is None):
            raise ValueError("a worker takes exactly one of handle (queue) or step (loop)")
        self.name = name
        self._handle = handle
        self._step = step
        self._queue: queue.Queue[T] | None = None
        if handle is not None:
            self._queue = source if source is not None else queue.Queue(maxsize=queue_size)
        self._batch_size = batch_size
        self._batch_wait_s = batch_wait_s
        self._tick_s = tick_s
        self._on_tick = on_tick
        self._setup = setup
        self._finish = finish
        self._drain_s = drain_s
        self._stop_timeout_s = drain_s + JOIN_MARGIN_S if stop_timeout_s is None else stop_timeout_s
        self.stall_after_s = (
            max(STALL_TICKS * tick_s, MIN_STALL_S) if stall_after_s is None else stall_after_s
        )
        self._supervisor = supervisor
        self._stop = threading.Event()
        self._deadline = float("inf")
        self._accepting = True
        self._thread: threading.Thread | None = None
        self._heartbeat = time.monotonic()
        self._lock = threading.Lock()  # state moves between the caller's and the worker's thread
        self.state: WorkerState = "new"
        self.dropped = 0  # items left in the queue when the drain deadline passed

    # --- any thread ---------------------------------------------------------------------

    def start(self) -> None:
        """Start the thread; a second call does nothing."""
        if not self._move("starting", ("new",)):
            return
        self._heartbeat = time.monotonic()
        if self._supervisor is not None:
            self._supervisor.watch(self)
        self._thread = threading.Thread(target=self._main, name=self.name, daemon=True)
        self._thread.start()

    def submit(self, item: T, timeout: float | None = None) -> bool:
        """Queue ``item``, waiting for room up to ``timeout`` seconds (None: as long as the
        worker runs); False when the queue stayed full, intake is closed, or the worker died."""
        assert self._queue is not None, "a step worker has no queue"
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._accepting:
            wait = (
                self._tick_s if deadline is None else min(self._tick_s, deadline - time.monotonic())
            )
            try:
                self._queue.put(item, timeout=max(wait, 0.0))
            except queue.Full:
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                continue
            return True
        return False

    def offer(self, item: T) -> bool:
        """Queue ``item`` if there is room; never waits."""
        assert self._queue is not None, "a step worker has no queue"
        if not self._accepting:
            return False
        try:
            self._queue.put_nowait(item)
        except queue.Full:
            return False
        return True

    def stop(self) -> None:
        """Close intake, drain until the deadline, count what is left as dropped. Safe twice."""
        with self._lock:
            if self.state == "new":
                return
        self._accepting = False
        self._move("stopping", ("starting", "running"))
        if not self._stop.is_set():
            self._deadline = time.monotonic() + self._drain_s
            self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(self._stop_timeout_s)
            if thread.is_alive():
                log.warning("worker_stop_timeout", worker=self.name, waited_s=self._stop_timeout_s)
        self._drop_left()

    def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` (a backoff) with a fresh heartbeat; True when a stop cut it short."""
        end = time.monotonic() + seconds
        while not self._stop.is_set():
            self._heartbeat = time.monotonic()
            remaining = end - self._heartbeat
            if remaining <= 0:
                return False
            self._stop.wait(min(remaining, self._tick_s))
        return True

    @property
    def stopping(self) -> bool:
        """True once ``stop`` was called: a body should wind down."""
        return self._stop.is_set()

    @property
    def depth(self) -> int:
        """Items waiting in the queue (0 for a step worker)."""
        return self._queue.qsize() if self._queue is not None else 0

    def problem(self) -> Problem | None:
        """``dead`` (the body raised), ``stalled`` (no heartbeat for ``stall_after_s``), or None."""
        if self.state == "dead":
            return "dead"
        if (
            self.state == "running"
            and not self._stop.is_set()
            and time.monotonic() - self._heartbeat > self.stall_after_s
        ):
            return "stalled"
        return None

    def alive(self) -> bool:
        """Running (set up, not stopping) with a fresh heartbeat."""
        return self.state == "running" and self.problem() is None

    # --- the worker's thread ------------------------------------------------------------

    def _main(self) -> None:
        try:
            if self._setup is not None and not self._setup():
                self._accepting = False
                return
            self._heartbeat = time.monotonic()
            self._move("running", ("starting",))
            if self._step is not None:
                while not self._stop.is_set():
                    self._heartbeat = time.monotonic()
                    self._step()
            else:
                self._queue_loop()
        except BaseException:
            self._die("worker_failed")
        finally:
            self._run_finish()
            self._move("stopped", _STARTED)

    def _queue_loop(self) -> None:
        assert self._handle is not None
        next_tick = time.monotonic() + self._tick_s
        while True:
            now = self._heartbeat = time.monotonic()
            if self._stop.is_set():
                batch = self._take(wait=False) if now < self._deadline else []
                if not batch:
                    return
            else:
                batch = self._take(wait=True)
            if batch:
                self._handle(batch)
            if self._on_tick is not None and time.monotonic() >= next_tick:
                self._on_tick()
                next_tick = time.monotonic() + self._tick_s

    def _take(self, *, wait: bool) -> list[T]:
        """Up to ``batch_size`` items: the first within a tick, the rest within ``batch_wait_s``."""
        assert self._queue is not None
        batch: list[T] = []
        try:
            batch.append(
                self._queue.get(timeout=self._tick_s) if wait else self._queue.get_nowait()
            )
        except queue.Empty:
            return batch
        if self._batch_size == 1:
            return batch
        fill_until = time.monotonic() + (self._batch_wait_s if wait else 0.0)
        while len(batch) < self._batch_size:
            remaining = fill_until - time.monotonic()
            try:
                batch.append(
                    self._queue.get(timeout=remaining)
                    if remaining > 0
                    else self._queue.get_nowait()
                )
            except queue.Empty:
                break
        return batch

    def _run_finish(self) -> None:
        if self._finish is None:
            return
        try:
            self._finish()
        except BaseException:
            self._die("worker_finish_failed")

    def _die(self, event: str) -> None:
        self._accepting = False
        if self._move("dead", _STARTED):  # one log line per worker, not one per failure
            log.exception(event, worker=self.name)

    def _move(self, to: WorkerState, from_: tuple[WorkerState, ...]) -> bool:
        with self._lock:
            if self.state not in from_:
                return False
            self.state = to
            return True

    def _drop_left(self) -> None:
        if self._queue is None:
            return
        left = 0
        with self._lock:
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
                left += 1
            self.dropped += left
        if left:
            log.warning("worker_dropped", worker=self.name, items=left)


class Supervisor:
    """The workers started on one registry: ``/healthz`` asks it which are failing; it
    exports ``rag_monitor_worker_up`` and ``rag_monitor_worker_dropped_total``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: dict[str, Worker[object]] = {}

    def watch(self, worker: Worker[T]) -> None:
        with self._lock:
            self._workers[worker.name] = worker  # type: ignore[assignment]

    def failing(self) -> dict[str, Problem]:
        """Worker name -> ``dead`` or ``stalled``, for every worker that is failing."""
        with self._lock:
            workers = list(self._workers.values())
        return {w.name: problem for w in workers if (problem := w.problem()) is not None}

    def describe(self) -> Iterable[Metric]:
        return self._families()

    def collect(self) -> Iterable[Metric]:
        up, dropped = self._families()
        with self._lock:
            workers = list(self._workers.values())
        for worker in workers:
            up.add_metric([worker.name], 0 if worker.problem() else 1)
            dropped.add_metric([worker.name], worker.dropped)
        return [up, dropped]

    @staticmethod
    def _families() -> tuple[GaugeMetricFamily, CounterMetricFamily]:
        up = GaugeMetricFamily(
            WORKER_UP,
            "1 while a background thread runs and beats; 0 when it died or stalled "
            "(/healthz then answers 503).",
            labels=["worker"],
        )
        dropped = CounterMetricFamily(
            WORKER_DROPPED_TOTAL,
            "Items left in a worker's queue when its stop deadline passed.",
            labels=["worker"],
        )
        return up, dropped
