"""What a scorer keeps and what it sheds: the per-service floor and the duplicates.

The floor per service. ``min_scored_per_hour`` is met once per service, whatever the
number of sidecars: each sidecar publishes ``floor`` candidates (its own floor, as inline),
and the scorers keep them only while the service has not had its floor in the current
window (``remote.floor_window_s``, an hour in production). The scorers share the floor by
the partitions they own: pairs are keyed by trace id, so each of P partitions carries
about 1/P of every service's candidates, and a scorer that owns k partitions keeps
``floor * k / P`` of them a window. The split is exact in expectation, not per window; a
rebalance in mid-window changes the share but not what was counted. Every scored pair
counts toward its service's window, so at high traffic the ``random`` stratum meets the
floor alone and the candidates are shed.

Priority when shedding: ``thumbs_down`` and ``probe`` are always judged; ``floor`` up to
the share; ``random`` within ``max_per_second`` (the scorer's capacity), the rest shed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Literal

from detectors.faithfulness.remote import ALWAYS
from monitor.sampler import TokenBucket

Decision = Literal["judge", "floor_met", "capacity"]


class FloorBudget:
    """Per-service windows of scored pairs and this scorer's share of each floor."""

    def __init__(
        self,
        per_hour: float,
        window_s: float,
        max_per_second: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_window = per_hour * window_s / 3600.0
        self._window_s = window_s
        self._clock = clock
        self._share = 1.0  # owned partitions / partitions of the topic
        self._windows: dict[str, tuple[float, int]] = {}  # service -> (start, scored)
        self._bucket = TokenBucket(max_per_second, max(1.0, max_per_second), clock)

    def set_share(self, owned: int, total: int) -> None:
        self._share = owned / total if total else 1.0

    def decide(self, service: str, stratum: str) -> Decision:
        """Whether to judge a pair of ``service`` taken for ``stratum``; a judged pair
        counts toward the service's window (call ``scored`` only for the judged)."""
        _start, scored = self._window(service)
        if stratum in ALWAYS:
            return "judge"
        if stratum == "floor":
            return "judge" if scored < self._per_window * self._share else "floor_met"
        return "judge" if self._bucket.take() else "capacity"

    def scored(self, service: str) -> None:
        start, scored = self._window(service)
        self._windows[service] = (start, scored + 1)

    def _window(self, service: str) -> tuple[float, int]:
        """The service's window: it starts at its first pair and lasts ``window_s``."""
        now = self._clock()
        window = self._windows.get(service)
        if window is None or now - window[0] >= self._window_s:
            window = self._windows[service] = (now, 0)
        return window


class SeenTraces:
    """The trace ids scored lately (by this scorer or, from the results topic, another):
    a redelivered pair is a duplicate. Bounded; shared by two threads."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, trace_id: str) -> bool:
        """Remember ``trace_id``; False when it was already there."""
        with self._lock:
            if trace_id in self._ids:
                self._ids.move_to_end(trace_id)
                return False
            self._ids[trace_id] = None
            while len(self._ids) > self._size:
                self._ids.popitem(last=False)
            return True

    def __contains__(self, trace_id: object) -> bool:
        with self._lock:
            return trace_id in self._ids
