"""What a scorer keeps and what it sheds: the per-service floor and the duplicates.

The floor per service. ``min_scored_per_hour`` is met once per service, whatever the
number of sidecars: each sidecar publishes ``floor`` candidates (its own floor, as inline),
and the scorers keep them at the floor's rate, spread evenly over the hour: a token bucket
per service fills at ``floor * share / 3600`` a second and saves at most
``remote.floor_burst_s`` seconds of it (one token at least). A window's budget spent at its
start would judge the hour's floor in its first minutes and leave the rest of the hour
without evidence. The scorers share the floor by the partitions they own: pairs are keyed
by trace id, so each of P partitions carries about 1/P of every service's candidates, and a
scorer that owns k partitions keeps ``floor * k / P`` of them an hour (exact in expectation;
a rebalance changes the rate from then on). Every judged pair takes a token when one is
there and owes it when none is (a debt bounded by the burst), so at high traffic the
``random`` stratum meets the floor alone and the candidates are shed.

Priority when shedding: ``thumbs_down`` and ``probe`` are always judged; ``floor`` while
the service's bucket has a token; ``random`` within ``max_per_second`` (the scorer's
capacity), the rest shed.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Literal

from detectors.faithfulness.remote import ALWAYS
from monitor.contract.sampler import TokenBucket

Decision = Literal["judge", "floor_met", "capacity"]


class FloorBudget:
    """Per-service buckets of the floor at this scorer's share, and the scorer's capacity."""

    def __init__(
        self,
        per_hour: float,
        burst_s: float,
        max_per_second: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_hour = per_hour
        self._burst_s = burst_s
        self._clock = clock
        self._share = 1.0  # owned partitions / partitions of the topic
        self._floors: dict[str, TokenBucket] = {}
        self._capacity = TokenBucket(max_per_second, max(1.0, max_per_second), clock)

    def set_share(self, owned: int, total: int) -> None:
        share = owned / total if total else 1.0
        if share != self._share:
            self._share = share
            for floor in self._floors.values():
                floor.set_hourly(self._per_hour * share, self._burst_s)

    def decide(self, service: str, stratum: str) -> Decision:
        """Whether to judge a pair of ``service`` taken for ``stratum``. Every pair to
        judge counts toward the service's floor: a ``floor`` pair needs a token, any other
        takes one even when none is there, so the floor's candidates wait until the
        bucket has made that up."""
        floor = self._floor(service)
        if stratum == "floor":
            return "judge" if floor.take() else "floor_met"
        if stratum not in ALWAYS and not self._capacity.take():
            return "capacity"
        floor.spend()
        return "judge"

    def _floor(self, service: str) -> TokenBucket:
        floor = self._floors.get(service)
        if floor is None:
            floor = self._floors[service] = TokenBucket.hourly(
                self._per_hour * self._share, self._burst_s, self._clock
            )
        return floor


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
