"""The drift detector: the front end over the MMD backends, run on its own worker thread.

``observe`` (the pipeline thread) only hands the query vector (or text, when an
embedder is configured) to a bounded queue; a full queue is a counted drop. The worker
validates vectors (wrong dimension, NaN/inf: rejected and counted), fills the reference
from the first ``reference_size`` vectors unless one is stored, keeps the last
``window_size`` vectors, and every ``test_every_records`` new vectors runs the test, sets
the gauges and appends the result to the history in ``service.state_dir``. A reference
replaced by ``rag-monitor drift set-reference`` is picked up before the next test.
"""

from __future__ import annotations

import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge

from detectors.drift.config import DriftConfig
from detectors.drift.names import DETECTED, MMD_STATISTIC, P_VALUE
from detectors.drift.result import DriftResult, OnlineTest, Vectors, WindowTest
from detectors.drift.store import FILE_NAME, DriftStore
from monitor.metrics import queue_depth
from monitor.trace import Event, RagTrace
from monitor.worker import Worker

__all__ = ["SIGNAL", "DriftDetector", "DriftResult", "make_window_test", "representation_of"]

log = structlog.get_logger("rag_monitor.drift")

SIGNAL = "query_embedding"
QUEUE_SIZE = 10_000
SAMPLE_PER_TEST = 64  # vectors kept per test for the report's clusters
EXAMPLES_PER_TEST = 8  # texts kept per test when keep_examples is on
_BATCH = 64
_TICK_S = 0.1
DRAIN_S = 5.0  # vectors still queued at shutdown are tested for this long, then dropped
STALL_S = 120.0  # loading an embedder or testing a large window takes seconds
RejectReason = Literal["wrong_dimension", "not_finite", "queue_full", "no_text"]


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


class DriftMetrics:
    """The detector's series, all with ``signal="query_embedding"``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.statistic = Gauge(
            MMD_STATISTIC,
            "MMD^2 of the last tested window against the reference (online: test statistic).",
            ["signal"],
            registry=registry,
        ).labels(SIGNAL)
        self.p_value = Gauge(
            P_VALUE,
            "Permutation p-value of the last drift test (absent in online mode).",
            ["signal"],
            registry=registry,
        ).labels(SIGNAL)
        self.detected = Gauge(
            DETECTED,
            "1 when the last drift test rejected 'same distribution as the reference'.",
            ["signal"],
            registry=registry,
        ).labels(SIGNAL)
        self.tests = Counter(
            "rag_drift_tests_total",
            "Drift tests run, by outcome (drift, no_drift).",
            ["signal", "outcome"],
            registry=registry,
        )
        self.vectors = Counter(
            "rag_drift_vectors_total",
            "Vectors accepted by the drift detector.",
            ["signal"],
            registry=registry,
        ).labels(SIGNAL)
        self.rejected = Counter(
            "rag_drift_rejected_vectors_total",
            "Vectors refused: wrong_dimension, not_finite (NaN/inf), queue_full, no_text.",
            ["signal", "reason"],
            registry=registry,
        )
        self.reference_size = Gauge(
            "rag_drift_reference_vectors",
            "Vectors in the reference (below reference_size while it is being filled).",
            ["signal"],
            registry=registry,
        ).labels(SIGNAL)

    def reject(self, reason: RejectReason) -> None:
        self.rejected.labels(SIGNAL, reason).inc()

    def show(self, result: DriftResult) -> None:
        self.statistic.set(result.statistic)
        if result.p_value is not None:
            self.p_value.set(result.p_value)
        self.detected.set(1 if result.is_drift else 0)


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
    ) -> None:
        self.config = config
        self.state_dir = Path(state_dir)
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

    # --- the worker thread: a failure here ends it (logged once, /healthz 503) -------------

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
    """State owned by the worker thread: the store, the reference, the window."""

    def __init__(self, owner: DriftDetector) -> None:
        self.owner = owner
        self.config = owner.config
        self.metrics = owner.metrics
        self.representation = representation_of(self.config)
        self.store: DriftStore | None = None
        self.reference_id: int | None = None
        self.dimension: int | None = None
        self.backend: WindowTest | None = None
        self.online: OnlineTest | None = None
        self.pending_reference: list[tuple[Vectors, str | None]] = []
        self.window: deque[tuple[Vectors, float]] = deque(maxlen=self.config.window_size)
        self.fresh: list[tuple[Vectors, str | None]] = []
        self.online_flagged = False
        self.online_last: DriftResult | None = None
        self.embedder: object | None = None
        # A stored reference is read at start; the state file is created only
        # when there is something to keep, so short-lived sidecars leave none.
        if (owner.state_dir / FILE_NAME).exists():
            self._open_store()
            self._load_reference()

    def _open_store(self) -> DriftStore:
        if self.store is None:
            self.store = DriftStore(self.owner.state_dir)
        return self.store

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def _load_reference(self) -> None:
        store = self._open_store()
        reference = store.reference()
        if reference is None:
            return
        if reference.representation != self.representation:
            log.warning(
                "drift_reference_ignored",
                stored=reference.representation,
                configured=self.representation,
                hint="run `rag-monitor drift set-reference` or let the first vectors rebuild it",
            )
            return
        self._use_reference(reference.id, reference.vectors)

    def _use_reference(self, reference_id: int, vectors: Vectors) -> None:
        self.reference_id = reference_id
        self.dimension = int(vectors.shape[1])
        if self.config.online:
            self.online = _make_online_test(self.config, vectors)
        else:
            self.backend = make_window_test(self.config, vectors)
        self.metrics.reference_size.set(len(vectors))
        log.info("drift_reference_ready", reference_id=reference_id, vectors=len(vectors))

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
        if self.reference_id is None:
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
        reference_id = self._open_store().set_reference(
            vectors, "first_traffic", self.representation, texts
        )
        self._use_reference(reference_id, vectors)

    def _reload_if_replaced(self) -> None:
        store = self._open_store()
        active = store.active_reference_id()
        if active is not None and active != self.reference_id:
            self._load_reference()

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
        self.metrics.show(result)
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
        if show:
            self.metrics.show(result)
        self.metrics.tests.labels(SIGNAL, "drift" if result.is_drift else "no_drift").inc()
        picked = self.owner._random.sample(self.fresh, min(SAMPLE_PER_TEST, len(self.fresh)))
        texts = [text if i < EXAMPLES_PER_TEST else None for i, (_, text) in enumerate(picked)]
        store = self._open_store()
        now = self.owner._clock()
        store.add_test(
            result,
            self.reference_id or 0,
            window_span=span,
            sample=[v for v, _ in picked],
            sample_texts=texts,
            now=now,
        )
        if window is not None:
            store.save_window(window, now=now)
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
