"""Runs the pair join on one thread: takes halves and signals, settles what it decides.

``settle`` gets every outcome once, on the thread that owns the join: the in-process
detector stores it; with Kafka, the owner of the pair's partition publishes it to the
pairs topic that every replica reads into its store. Either way the metrics are recorded
here, by the one replica that decided the pair.
"""

from __future__ import annotations

from collections.abc import Callable

from detectors.shadow.join import PairJoin
from detectors.shadow.metrics import ShadowMetrics
from detectors.shadow.model import PairHalf, PairOutcome, Signal


class JoinRunner:
    """A ``PairJoin`` with its metrics and where its outcomes go; one thread at a time."""

    def __init__(
        self,
        join: PairJoin,
        metrics: ShadowMetrics,
        settle: Callable[[PairOutcome], object],
        clock: Callable[[], float],
    ) -> None:
        self._join = join
        self._metrics = metrics
        self._settle = settle
        self._clock = clock
        metrics.pending.labels("halves").set_function(lambda: join.waiting)
        metrics.pending.labels("pairs").set_function(lambda: join.settling)

    def take(self, message: PairHalf | Signal) -> None:
        if isinstance(message, Signal):
            result = self._join.signal(message)
            if result != "attached":
                self._metrics.late_signals.labels(message.kind, result).inc()
            return
        self._decided(self._join.add(message, self._clock()))

    def expire(self) -> None:
        self._decided(self._join.expire(self._clock()))

    def drain(self) -> None:
        self._decided(self._join.drain(self._clock()))

    def _decided(self, outcomes: list[PairOutcome]) -> None:
        for outcome in outcomes:
            self._metrics.record(outcome)
            self._settle(outcome)
