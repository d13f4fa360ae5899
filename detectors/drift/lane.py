"""One representation's drift test: its reference, its window, its backend.

A vector is only ever tested against the reference of its own representation: a lane
fills its reference from its first ``reference_size`` vectors unless the store holds
one (then it is used at once, e.g. after a rollback to an earlier encoder), keeps the
last ``window_size`` vectors and tests every ``test_every_records`` new ones.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import numpy as np
import structlog

from detectors.drift.config import DriftConfig
from detectors.drift.metrics import DriftMetrics
from detectors.drift.result import DriftResult, OnlineTest, Vectors, WindowTest
from detectors.drift.state_writer import StateWriter
from detectors.drift.store import Reference

log = structlog.get_logger("rag_monitor.drift")


def make_window_test(
    config: DriftConfig, reference: Vectors, seed: int | None = None
) -> WindowTest:
    """The configured batch backend for ``reference`` (alibi is imported only here);
    ``seed`` seeds the scipy backend's permutations."""
    if config.backend == "alibi":
        from detectors.drift.alibi_backend import AlibiMmd

        return AlibiMmd(reference, config.p_value, config.n_permutations)
    from detectors.drift.scipy_backend import ScipyMmd

    return ScipyMmd(reference, config.p_value, config.n_permutations, seed=seed)


def make_online_test(config: DriftConfig, reference: Vectors) -> OnlineTest:
    from detectors.drift.alibi_backend import AlibiMmdOnline

    return AlibiMmdOnline(reference, config.ert, config.window_size, config.n_bootstraps)


class LaneHost(Protocol):
    """What a lane reports to: the worker's state."""

    config: DriftConfig
    metrics: DriftMetrics
    writer: StateWriter
    seed: int | None  # of the permutations: a seeded detector gives repeatable p-values

    def record(
        self,
        lane: Lane,
        result: DriftResult,
        span: tuple[float, float],
        window: Vectors | None,
        *,
        show: bool,
    ) -> None: ...

    def show(self, tested: Lane) -> None: ...


class Lane:
    """The reference, window and backend of one representation (worker thread only)."""

    def __init__(self, representation: str, host: LaneHost) -> None:
        self.representation = representation
        self.host = host
        self.config = host.config
        self.metrics = host.metrics
        self.has_reference = False
        self.dimension: int | None = None
        self.backend: WindowTest | None = None
        self.online: OnlineTest | None = None
        self.pending_reference: list[tuple[Vectors, str | None]] = []
        self.window: deque[tuple[Vectors, float]] = deque(maxlen=self.config.window_size)
        self.fresh: list[tuple[Vectors, str | None]] = []
        self.online_flagged = False
        self.last_result: DriftResult | None = None
        self.unusable_reference_logged = False
        stored = host.writer.stored_reference(representation)
        if stored is not None:
            self.adopt(stored)
        self._show_fill()

    def adopt(self, reference: Reference) -> None:
        """Use a stored reference of this representation."""
        self.use_reference(reference.vectors, reference.texts, reference.id)

    def use_reference(
        self, vectors: Vectors, texts: list[str | None] | None, stored_id: int | None
    ) -> None:
        try:
            if self.config.online:
                self.online = make_online_test(self.config, vectors)
            else:
                self.backend = make_window_test(self.config, vectors, self.host.seed)
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
        self.host.writer.use_reference(self.representation, vectors, texts, stored_id)
        self._show_fill()
        log.info(
            "drift_reference_ready",
            representation=self.representation,
            reference_id=self.host.writer.reference_ids.get(self.representation),
            vectors=len(vectors),
        )

    def _show_fill(self) -> None:
        filled = self.config.reference_size if self.has_reference else len(self.pending_reference)
        self.metrics.reference_fill.labels(self.representation).set(
            filled / self.config.reference_size
        )

    def forget(self) -> None:
        """The representation is no longer tracked: drop its series."""
        self.metrics.reference_fill.remove(self.representation)
        self.host.writer.forget(self.representation)

    def add(self, vector: Vectors, text: str | None, at: float) -> None:
        """Test or collect one valid vector (``text`` only when examples are kept)."""
        if vector.ndim != 1 or (self.dimension is not None and len(vector) != self.dimension):
            self.metrics.reject("wrong_dimension")
            return
        if not np.isfinite(vector).all():
            self.metrics.reject("not_finite")
            return
        self.metrics.vectors.inc()
        if not self.has_reference:
            self._fill_reference(vector, text)
            return
        self.window.append((vector, at))
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
        self._show_fill()
        if len(self.pending_reference) < self.config.reference_size:
            return
        vectors = np.stack([v for v, _ in self.pending_reference])
        texts = [t for _, t in self.pending_reference] if self.config.keep_examples else None
        self.pending_reference = []
        self.use_reference(vectors, texts, None)

    def _test(self) -> None:
        replaced = self.host.writer.replaced_reference(self.representation)
        if replaced is not None:
            self.adopt(replaced)
        assert self.backend is not None
        window = np.stack([v for v, _ in self.window])
        result = self.backend.test(window)
        times = [t for _, t in self.window]
        self.last_result = result
        self.host.record(self, result, (min(times), max(times)), window, show=True)

    def _online_step(self, vector: Vectors) -> None:
        assert self.online is not None
        result = self.online.update(vector)
        self.last_result = result
        self.host.show(self)
        self.online_flagged = self.online_flagged or result.is_drift
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
            self.host.record(self, flagged, (min(times), max(times)), None, show=False)
            self.online_flagged = False
