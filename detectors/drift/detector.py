"""The drift detector: the front end over the MMD backends, run on its own worker thread.

``observe`` (the pipeline thread) only hands the query vector (or text, when an
embedder is configured) and its representation to a bounded queue; a full queue is a
counted drop. A trace without the one it needs is counted as a missing input
(``query_vector``, or ``query`` with an embedder), never tested as anything. The worker
tracks the representations (``representations.py``: shares, changes) and gives each
vector to the lane of its representation (``lane.py``), which
validates it (wrong dimension, NaN/inf: rejected and counted), fills its reference from
the first ``reference_size`` vectors unless one is stored, and tests its window every
``test_every_records`` new vectors; the results go to the gauges and to the history in
``service.state_dir``. With ``embedder`` set there is one lane, the embedder's (the
pinned representation), whatever model the application traces. A reference replaced by
``rag-monitor drift set-reference`` is picked up before the next test.
The tests run from memory: a storage fault is counted and retried
(``detectors/drift/state_writer.py``), never the end of the worker.
"""

from __future__ import annotations

import math
import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import structlog

from detectors.drift.config import DriftConfig
from detectors.drift.lane import Lane
from detectors.drift.metrics import SIGNAL, DriftMetrics
from detectors.drift.representations import RepresentationShares, representation_of_trace
from detectors.drift.result import DriftResult, Vectors
from detectors.drift.state_writer import StateWriter
from monitor.contract.metrics import queue_depth
from monitor.contract.missing import MissingInputs
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.state import DEFAULT_STATE_MAX_BYTES
from monitor.contract.trace import Event, RagTrace
from monitor.contract.worker import Worker

log = structlog.get_logger("rag_monitor.drift")

QUEUE_SIZE = 10_000
SAMPLE_PER_TEST = 64  # vectors kept per test for the report's clusters
EXAMPLES_PER_TEST = 8  # texts kept per test when keep_examples is on
_BATCH = 64
_TICK_S = 0.1
DRAIN_S = 5.0  # vectors still queued at shutdown are tested for this long, then dropped
STALL_S = 120.0  # loading an embedder or testing a large window takes seconds
CHANGE_LOG_EVERY_S = 60.0


def pinned_representation(config: DriftConfig) -> str | None:
    """The sidecar's own embedder's representation, or None: the traced ones are tested."""
    return None if config.embedder is None else f"embedder:{config.embedder}"


@dataclass(frozen=True, slots=True)
class _Item:
    vector: tuple[float, ...] | None
    text: str | None
    time: float
    representation: str | None  # the application's, as traced


class DriftDetector:
    """Query-embedding drift (MMD) on a worker thread; persisted reference and history."""

    name: ClassVar[str] = "drift"

    def __init__(
        self,
        config: DriftConfig,
        state_dir: Path,
        registry: SidecarRegistry,
        *,
        clock: Callable[[], float] = time.time,
        seed: int | None = None,
        state_max_bytes: int = DEFAULT_STATE_MAX_BYTES,
    ) -> None:
        self.config = config
        self.state_dir = Path(state_dir)
        self.state = registry.state_dir(self.state_dir, state_max_bytes)
        self.metrics = DriftMetrics(registry)
        # The input the detector tests: traced query vectors, or the query its embedder embeds.
        needs = "query_vector" if config.embedder is None else "query"
        self._missing = MissingInputs(registry, self.name, [needs] if config.enabled else [])
        self._clock = clock
        self._random = random.Random(seed)
        self.seed = seed
        self._worker: Worker[_Item] = Worker(
            "drift",
            handle=self._handle,
            queue_size=QUEUE_SIZE,
            batch_size=_BATCH,
            tick_s=_TICK_S,
            setup=self._setup,
            finish=self._close,
            drain_s=DRAIN_S,
            stall_after_s=STALL_S,
            supervisor=registry.supervisor,
        )
        queue_depth(registry).labels("drift").set_function(lambda: self._worker.depth)
        self._state: _DriftState | None = None
        self.tests_done = 0  # for tests and the demo: results seen by the worker
        self.last_result: DriftResult | None = None

    # --- the pipeline thread ---------------------------------------------------------------

    def observe(self, trace: RagTrace) -> None:
        if not self.config.enabled:
            return
        representation = representation_of_trace(trace)
        at = trace.time.timestamp()
        if self.config.embedder is None:
            if trace.query_embedding is None:
                self._missing.count("query_vector")
                return
            item = _Item(trace.query_embedding, trace.query, at, representation)
        else:
            if not trace.query:
                self._missing.count("query")
                if representation is None:
                    return  # nothing to embed and no traced representation to track
            item = _Item(None, trace.query or None, at, representation)
        if not self._worker.offer(item):
            self.metrics.reject("queue_full")

    def observe_event(self, event: Event) -> None:
        del event  # drift looks at queries only

    def start(self) -> None:
        if self.config.enabled:
            self._worker.start()

    def shutdown(self) -> None:
        """Take what is queued (within ``DRAIN_S``), close the store, stop. Safe twice."""
        self._worker.stop()

    # --- the worker thread: a failure here ends it (logged once, /healthz 503); storage
    # faults do not: the state writer counts them ----------------------------------------

    def _setup(self) -> bool:
        self._state = _DriftState(self)
        return True

    def _handle(self, items: list[_Item]) -> None:
        assert self._state is not None
        self._state.handle(items)

    def _close(self) -> None:
        if self._state is not None:
            self._state.close()


class _DriftState:
    """State owned by the worker thread: the representations, their lanes, the writer."""

    def __init__(self, owner: DriftDetector) -> None:
        self.owner = owner
        self.config = owner.config
        self.metrics = owner.metrics
        self.pinned = pinned_representation(self.config)
        self.seed = owner.seed
        keep = self.config.max_representations
        self.writer = StateWriter(owner.state, keep, owner._clock)
        recent = self.writer.recent_representations()
        self.shares = RepresentationShares(self.metrics, self.config.window_size, keep, recent)
        self.lanes: OrderedDict[str, Lane] = OrderedDict()
        self.embedder: object | None = None
        self.change_logged_at = -math.inf
        self.unlogged_changes = 0
        # A restart continues with the stored references of the latest traffic at once.
        for name in [self.pinned] if self.pinned else sorted(recent)[:keep]:
            self._lane(name)

    def close(self) -> None:
        self.writer.close()

    def handle(self, items: list[_Item]) -> None:
        for item in items:
            if item.representation is not None:
                self._see(item.representation, item.time)
        self.shares.export()
        self.writer.current = self.shares.tracked_current()
        for vector, item in zip(self._vectors(items), items, strict=True):
            name = self.pinned or item.representation
            if vector is not None and name is not None:
                text = item.text if self.config.keep_examples else None
                self._lane(name).add(vector, text, item.time)

    def _see(self, representation: str, at: float) -> None:
        change, evicted = self.shares.see(representation, at)
        self.writer.count(self.shares.label(representation), at)
        if evicted is not None and evicted in self.lanes:
            self.lanes.pop(evicted).forget()
        if change is None:
            return
        self.metrics.representation_changes.inc()
        self.writer.add_change(change.time, change.old, change.new)
        # One line per change, but a producer cycling through model names must not flood
        # the log: at most one line per CHANGE_LOG_EVERY_S, saying how many went unlogged.
        now = self.owner._clock()
        if now - self.change_logged_at >= CHANGE_LOG_EVERY_S:
            log.info(
                "drift_representation_changed",
                old=change.old,
                new=change.new,
                unlogged_changes=self.unlogged_changes,
            )
            self.change_logged_at, self.unlogged_changes = now, 0
        else:
            self.unlogged_changes += 1

    def _lane(self, name: str) -> Lane:
        lane = self.lanes.get(name)
        if lane is None:
            lane = self.lanes[name] = Lane(name, self)
            if len(self.lanes) > self.config.max_representations:
                _, evicted = self.lanes.popitem(last=False)
                evicted.forget()
        self.lanes.move_to_end(name)
        return lane

    def _vectors(self, items: list[_Item]) -> list[Vectors | None]:
        if self.config.embedder is None:
            return [np.asarray(item.vector, dtype=np.float64) for item in items]
        texts = [item.text for item in items]  # None: no query, counted missing in observe
        wanted = [text for text in texts if text]
        if not wanted:
            return [None] * len(items)
        if self.embedder is None:
            from detectors.drift.embedder import QueryEmbedder

            self.embedder = QueryEmbedder(self.config.embedder)
        embedded = iter(self.embedder.embed(wanted))  # type: ignore[attr-defined]
        return [np.asarray(next(embedded), dtype=np.float64) if t else None for t in texts]

    # --- results (the lanes call these) ----------------------------------------------------

    def show(self, tested: Lane) -> None:
        """Set the result gauges from the lanes of current traffic: the verdict is 1 when the
        latest test of any of them flagged; the values are the flagged or lowest-p one's."""
        current = self.shares.current()
        results = [
            lane.last_result
            for lane in self.lanes.values()
            if lane.last_result is not None
            and (lane is tested or self.pinned is not None or lane.representation in current)
        ]
        shown = max(results, key=lambda r: (r.is_drift, -(r.p_value or 0.0)))
        self.metrics.show(shown, self.owner._clock())

    def record(
        self,
        lane: Lane,
        result: DriftResult,
        span: tuple[float, float],
        window: Vectors | None,
        *,
        show: bool,
    ) -> None:
        now = self.owner._clock()
        if show:
            self.show(lane)
        self.metrics.tests.labels(SIGNAL, "drift" if result.is_drift else "no_drift").inc()
        picked = self.owner._random.sample(lane.fresh, min(SAMPLE_PER_TEST, len(lane.fresh)))
        texts = [text if i < EXAMPLES_PER_TEST else None for i, (_, text) in enumerate(picked)]
        sample = np.stack([v for v, _ in picked]) if picked else np.empty((0, 0))
        self.writer.add_test(
            result,
            lane.representation,
            span=span,
            sample=sample,
            texts=texts,
            window=window,
            now=now,
        )
        lane.fresh = []
        self.owner.last_result = result
        self.owner.tests_done += 1
        log.info(
            "drift_test",
            representation=lane.representation,
            statistic=round(result.statistic, 6),
            p_value=result.p_value,
            drift=result.is_drift,
            backend=result.backend,
        )
