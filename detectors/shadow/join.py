"""The join of a pair's two halves, on whichever thread owns it (one at a time).

A half waits ``pair_ttl_s`` for its twin (the other side: production against any other
variant). Joined, the pair waits ``settle_s`` more for late signals (a judge's score, a
false-exclusion decision) and is then final. Every half ends in one outcome: ``joined``,
``timed_out``, ``evicted`` (over ``max_pending``), ``stopped`` (drained at shutdown) or
``duplicate`` (its side of the pair was already there, or the pair was already final).
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from detectors.shadow.model import Outcome, PairHalf, PairOutcome, Signal

SignalResult = Literal["attached", "late", "unknown"]


@dataclass(slots=True)
class _Joined:
    production: PairHalf
    shadow: PairHalf


class PairJoin:
    """Bounded maps of waiting halves and settling pairs, expiring oldest first."""

    def __init__(
        self,
        *,
        pair_ttl_s: float,
        settle_s: float,
        max_pending: int,
        wall_clock: Callable[[], float],
    ) -> None:
        self._ttl_s = pair_ttl_s
        self._settle_s = settle_s
        self._max = max_pending
        self._wall_clock = wall_clock  # the outcomes' timestamps (TTLs use the given ``now``)
        # pair id -> (deadline, value); every entry of a map lives as long, so the oldest is
        # first and expiry pops from the front.
        self._waiting: OrderedDict[str, tuple[float, PairHalf]] = OrderedDict()
        self._settling: OrderedDict[str, tuple[float, _Joined]] = OrderedDict()
        # Pair ids already final, so that a replayed half is a duplicate, not a new pair.
        self._final: OrderedDict[str, float] = OrderedDict()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def settling(self) -> int:
        return len(self._settling)

    def add(self, half: PairHalf, now: float) -> list[PairOutcome]:
        """Hold ``half`` or join it with its twin; the outcomes this decided."""
        pair_id = half.pair_id
        if pair_id in self._settling or pair_id in self._final:
            return [self._alone("duplicate", half)]
        held = self._waiting.get(pair_id)
        if held is None:
            self._waiting[pair_id] = (now + self._ttl_s, half)
            return self._bound(now)
        twin = held[1]
        if twin.trace_id == half.trace_id or twin.production == half.production:
            return [self._alone("duplicate", half)]
        del self._waiting[pair_id]
        production, shadow = (twin, half) if twin.production else (half, twin)
        self._settling[pair_id] = (now + self._settle_s, _Joined(production, shadow))
        return self._bound(now)

    def signal(self, signal: Signal) -> SignalResult:
        """Attach a late value to its half; ``late`` when the pair is already final."""
        waiting = self._waiting.get(signal.pair_id)
        if waiting is not None and waiting[1].trace_id == signal.trace_id:
            deadline, half = waiting
            self._waiting[signal.pair_id] = (deadline, _with_signal(half, signal))
            return "attached"
        settling = self._settling.get(signal.pair_id)
        if settling is not None:
            joined = settling[1]
            if joined.production.trace_id == signal.trace_id:
                joined.production = _with_signal(joined.production, signal)
                return "attached"
            if joined.shadow.trace_id == signal.trace_id:
                joined.shadow = _with_signal(joined.shadow, signal)
                return "attached"
        return "late" if signal.pair_id in self._final else "unknown"

    def expire(self, now: float) -> list[PairOutcome]:
        """Halves past ``pair_ttl_s`` (timed_out) and pairs past ``settle_s`` (joined)."""
        outcomes = []
        while self._waiting and next(iter(self._waiting.values()))[0] <= now:
            _, (_, half) = self._waiting.popitem(last=False)
            outcomes.append(self._alone("timed_out", half))
        while self._settling and next(iter(self._settling.values()))[0] <= now:
            pair_id, (_, joined) = self._settling.popitem(last=False)
            outcomes.append(self._finish(pair_id, joined, now))
        while self._final and next(iter(self._final.values())) <= now:
            self._final.popitem(last=False)
        return outcomes

    def drain(self, now: float) -> list[PairOutcome]:
        """Everything held, at shutdown: waiting halves stopped, settling pairs joined."""
        outcomes = [self._alone("stopped", half) for _, half in self._waiting.values()]
        outcomes += [self._finish(p, j, now) for p, (_, j) in self._settling.items()]
        self._waiting.clear()
        self._settling.clear()
        return outcomes

    def _bound(self, now: float) -> list[PairOutcome]:
        outcomes = []
        while len(self._waiting) > self._max:
            _, (_, half) = self._waiting.popitem(last=False)
            outcomes.append(self._alone("evicted", half))
        while len(self._settling) > self._max:  # final early: it loses only late signals
            pair_id, (_, joined) = self._settling.popitem(last=False)
            outcomes.append(self._finish(pair_id, joined, now))
        return outcomes

    def _finish(self, pair_id: str, joined: _Joined, now: float) -> PairOutcome:
        self._final[pair_id] = now + self._ttl_s
        self._final.move_to_end(pair_id)
        while len(self._final) > self._max:
            self._final.popitem(last=False)
        return PairOutcome("joined", pair_id, self._wall_clock(), joined.production, joined.shadow)

    def _alone(self, outcome: Outcome, half: PairHalf) -> PairOutcome:
        if half.production:
            return PairOutcome(outcome, half.pair_id, self._wall_clock(), production=half)
        return PairOutcome(outcome, half.pair_id, self._wall_clock(), shadow=half)


def _with_signal(half: PairHalf, signal: Signal) -> PairHalf:
    if signal.kind == "faithfulness":
        return dataclasses.replace(half, faithfulness=signal.value)
    return dataclasses.replace(half, excluded=signal.value >= 1.0)
