"""The drift detector: the front end over the MMD backends, run on its own worker thread.

``observe`` (the pipeline thread) only hands the query vector (or text, when an
embedder is configured) to a bounded queue; a full queue is a counted drop. The worker
validates vectors (wrong dimension, NaN/inf: rejected and counted), fills the reference
from the first ``reference_size`` vectors unless one is stored, keeps the last
``window_size`` vectors, and every ``test_every_records`` new vectors runs the test, sets
the gauges and appends the result to the history in ``service.state_dir``. A reference
replaced by ``rag-monitor drift set-reference`` is picked up before the next test.
The tests run from memory: a storage fault is counted and retried
(``detectors/drift/state_writer.py``), never the end of the worker.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import structlog
from prometheus_client import CollectorRegistry

from detectors.drift.config import DriftConfig
from detectors.drift.metrics import SIGNAL, DriftMetrics
from detectors.drift.result import DriftResult, OnlineTest, Vectors, WindowTest
from detectors.drift.state_writer import StateWriter
from detectors.drift.store import Reference
from monitor.metrics import queue_depth
from monitor.state import DEFAULT_STATE_MAX_BYTES, shared_state_dir
from monitor.trace import Event, RagTrace
from monitor.worker import Worker

__all__ = ["SIGNAL", "DriftDetector", "DriftResult", "make_window_test", "representation_of"]

log = structlog.get_logger("rag_monitor.drift")

QUEUE_SIZE = 10_000
SAMPLE_PER_TEST = 64  # vectors kept per test for the report's clusters
EXAMPLES_PER_TEST = 8  # texts kept per test when keep_examples is on
_BATCH = 64
_TICK_S = 0.1
DRAIN_S = 5.0  # vectors still queued at shutdown are tested for this long, then dropped
STALL_S = 120.0  # loading an embedder or testing a large window takes seconds


def representation_of(config: DriftConfig) -> str:
    """What the vectors are: the retriever's traced vectors or a named embedder."""
    return "traced" if config.embedder is None else f"embedder:{config.embedder}"


def make_window_test(config: DriftConfig, reference: Vectors) -> WindowTest:
    """The configured batch backend for ``reference`` (alibi is imported only here)."""
    if config.backend == "alibi":
        from detectors.drift.alibi_backend import AlibiMmd

        return AlibiMmd(reference, config.p_value, config.n_permutations)
    from detectors.drift.scipy_backend import ScipyMmd

    return ScipyMmd(reference, config.p_value, config.n_permutations)


def _make_online_test(config: DriftConfig, reference: Vectors) -> OnlineTest:
    from detectors.drift.alibi_backend import AlibiMmdOnline

    return AlibiMmdOnline(reference, config.ert, config.window_size, config.n_bootstraps)


@dataclass(frozen=True, slots=True)
class _Item:
    vector: tuple[float, ...] | None
    text: str | None
    time: float


class DriftDetector:
    """Query-embedding drift (MMD) on a worker thread; persisted reference and history."""

    name: ClassVar[str] = "drift"

    def __init__(
        self,
        config: DriftConfig,
        state_dir: Path,
        registry: CollectorRegistry,
        *,
        clock: Callable[[], float] = time.time,
        seed: int | None = None,
        state_max_bytes: int = DEFAULT_STATE_MAX_BYTES,
    ) -> None:
        self.config = config
        self.state_dir = Path(state_dir)
        self.state = shared_state_dir(registry, self.state_dir, state_max_bytes)
        self.metrics = DriftMetrics(registry)
        self._clock = clock
        self._random = random.Random(seed)
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
            registry=registry,
        )
        queue_depth(registry).labels("drift").set_function(lambda: self._worker.depth)
        self._state: _DriftState | None = None
        self.tests_done = 0  # for tests and the demo: results seen by the worker
        self.last_result: DriftResult | None = None

    # --- the pipeline thread ---------------------------------------------------------------

    def observe(self, trace: RagTrace) -> None:
        if not self.config.enabled:
            return
        if self.config.embedder is None:
            if trace.query_embedding is None:
                return
            item = _Item(trace.query_embedding, trace.query, trace.time.timestamp())
        else:
            item = _Item(None, trace.query, trace.time.timestamp())
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
    """State owned by the worker thread: the reference, the window, the state writer."""

    def __init__(self, owner: DriftDetector) -> None:
        self.owner = owner
        self.config = owner.config
        self.metrics = owner.metrics
        self.representation = representation_of(self.config)
        self.writer = StateWriter(owner.state, self.representation, owner._clock)
        self.has_reference = False
        self.dimension: int | None = None
        self.backend: WindowTest | None = None
        self.online: OnlineTest | None = None
        self.pending_reference: list[tuple[Vectors, str | None]] = []
        self.window: deque[tuple[Vectors, float]] = deque(maxlen=self.config.window_size)
        self.fresh: list[tuple[Vectors, str | None]] = []
        self.online_flagged = False
        self.online_last: DriftResult | None = None
        self.embedder: object | None = None
        self.unusable_reference_logged = False
        stored = self.writer.stored_reference()
        if stored is not None:
            self._adopt(stored)

    def close(self) -> None:
        self.writer.close()

    def _adopt(self, reference: Reference) -> None:
        """Use a stored reference, unless it holds vectors of another representation."""
        if reference.representation != self.representation:
            log.warning(
                "drift_reference_ignored",
                stored=reference.representation,
                configured=self.representation,
                hint="run `rag-monitor drift set-reference` or let the first vectors rebuild it",
            )
            return
        self._use_reference(reference.vectors, reference.texts, reference.id)

    def _use_reference(
        self, vectors: Vectors, texts: list[str | None] | None, stored_id: int | None
    ) -> None:
        try:
            if self.config.online:
                self.online = _make_online_test(self.config, vectors)
            else:
                self.backend = make_window_test(self.config, vectors)
        except ValueError as exc:
            # Production input, not a bug: e.g. a service sending one constant vector leaves
            # no kernel bandwidth. Count the vectors, log once, and collect a new reference.
            self.metrics.reject("unusable_reference", len(vectors))
            if not self.unusable_reference_logged:
                self.unusable_reference_logged = True
                log.warning("drift_reference_unusable", vectors=len(vectors), reason=str(exc))
            self.metrics.reference_size.set(0)
            return
        self.has_reference = True
        self.dimension = int(vectors.shape[1])
        self.metrics.reference_size.set(len(vectors))
        self.writer.use_reference(vectors, texts, stored_id)
        log.info(
            "drift_reference_ready", reference_id=self.writer.reference_id, vectors=len(vectors)
        )

    # --- vectors ---------------------------------------------------------------------------

    def handle(self, items: list[_Item]) -> None:
        for vector, item in zip(self._vectors(items), items, strict=True):
            if vector is not None:
                self._add(vector, item)

    def _vectors(self, items: list[_Item]) -> list[Vectors | None]:
        if self.config.embedder is None:
            return [np.asarray(item.vector, dtype=np.float64) for item in items]
        texts = [item.text for item in items]
        for text in texts:
            if not text:
                self.metrics.reject("no_text")
        wanted = [text for text in texts if text]
        if not wanted:
            return [None] * len(items)
        if self.embedder is None:
            from detectors.drift.embedder import QueryEmbedder

            self.embedder = QueryEmbedder(self.config.embedder)
        embedded = iter(self.embedder.embed(wanted))  # type: ignore[attr-defined]
        return [np.asarray(next(embedded), dtype=np.float64) if t else None for t in texts]

    def _add(self, vector: Vectors, item: _Item) -> None:
        if vector.ndim != 1 or (self.dimension is not None and len(vector) != self.dimension):
            self.metrics.reject("wrong_dimension")
            return
        if not np.isfinite(vector).all():
            self.metrics.reject("not_finite")
            return
        self.metrics.vectors.inc()
        text = item.text if self.config.keep_examples else None
        if not self.has_reference:
            self._fill_reference(vector, text)
            return
        self.window.append((vector, item.time))
        self.fresh.append((vector, text))
        if self.online is not None:
            self._online_step(vector)
        elif len(self.fresh) >= self.config.test_every_records and (
            len(self.window) == self.window.maxlen
        ):
            self._test()

    def _fill_reference(self, vector: Vectors, text: str | None) -> None:
        self.dimension = len(vector)
        self.pending_reference.append((vector, text))
        self.metrics.reference_size.set(len(self.pending_reference))
        if len(self.pending_reference) < self.config.reference_size:
            return
        vectors = np.stack([v for v, _ in self.pending_reference])
        texts = [t for _, t in self.pending_reference] if self.config.keep_examples else None
        self.pending_reference = []
        self._use_reference(vectors, texts, None)

    def _reload_if_replaced(self) -> None:
        replaced = self.writer.replaced_reference()
        if replaced is not None:
            self._adopt(replaced)

    def _test(self) -> None:
        self._reload_if_replaced()
        assert self.backend is not None
        window = np.stack([v for v, _ in self.window])
        result = self.backend.test(window)
        times = [t for _, t in self.window]
        self._record(result, (min(times), max(times)), window)

    def _online_step(self, vector: Vectors) -> None:
        assert self.online is not None
        result = self.online.update(vector)
        self.metrics.show(result, self.owner._clock())
        self.online_flagged = self.online_flagged or result.is_drift
        self.online_last = result
        if len(self.fresh) >= self.config.test_every_records:
            flagged = DriftResult(
                is_drift=self.online_flagged,
                statistic=result.statistic,
                p_value=None,
                threshold=result.threshold,
                sigma=result.sigma,
                n_reference=result.n_reference,
                n_window=result.n_window,
                backend=result.backend,
            )
            times = [t for _, t in self.window]
            self._record(flagged, (min(times), max(times)), None, show=False)
            self.online_flagged = False

    def _record(
        self,
        result: DriftResult,
        span: tuple[float, float],
        window: Vectors | None,
        *,
        show: bool = True,
    ) -> None:
        now = self.owner._clock()
        if show:
            self.metrics.show(result, now)
        self.metrics.tests.labels(SIGNAL, "drift" if result.is_drift else "no_drift").inc()
        picked = self.owner._random.sample(self.fresh, min(SAMPLE_PER_TEST, len(self.fresh)))
        texts = [text if i < EXAMPLES_PER_TEST else None for i, (_, text) in enumerate(picked)]
        sample = np.stack([v for v, _ in picked]) if picked else np.empty((0, 0))
        self.writer.add_test(result, span=span, sample=sample, texts=texts, window=window, now=now)
        self.fresh = []
        self.owner.last_result = result
        self.owner.tests_done += 1
        log.info(
            "drift_test",
            statistic=round(result.statistic, 6),
            p_value=result.p_value,
            drift=result.is_drift,
            backend=result.backend,
        )
