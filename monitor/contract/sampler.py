"""The sampler: which traces an expensive detector looks at, and a bounded queue to it.

Selection is a hash of the trace id (of the pair id when the trace has one, so
the twins of a shadow pair are taken together) below ``sample_rate``, so replicas of the
sidecar and replays of the same traffic pick the same traces. Probes and
traces that receive thumbs-down feedback within a bounded wait are always
taken (``always_sample``); they skip the hash and the rate cap, since they are
the few traces worth most. Hash-selected traces pass a token bucket of
``max_per_second``. Whatever is taken goes into a bounded queue; a full queue
(or an empty bucket) drops the trace and counts it: ingestion never waits. A detector
may ``settle`` a taken trace inline when it needs no work (no evidence to score, say):
it is counted ``settled``, neither queued nor charged to the rate cap.

At low traffic ``sample_rate`` yields too few scored answers for an alert to rest on;
``min_scored_per_hour`` raises the rate so that, at the traffic of the last hour, that
many traces an hour are taken (still within the token bucket, the scorer's capacity).
The rate in force is exported as ``rag_monitor_effective_sample_rate{detector}``.

Everything but the queue's consumer runs on the pipeline thread, so the
sampler's own state needs no lock.
"""

from __future__ import annotations

import hashlib
import queue
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal, TypeVar

from prometheus_client import Gauge

from monitor.contract.metrics import queue_depth, samples_counter
from monitor.contract.names import EFFECTIVE_SAMPLE_RATE
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import Event, Feedback, RagTrace

SampleReason = Literal["rate", "probe", "thumbs_down"]
_Held = TypeVar("_Held")

THUMBS_DOWN_WAIT_S = 120.0
MAX_AWAITING = 10_000
_HASH_SPACE = float(1 << 64)


def trace_fraction(trace_id: str) -> float:
    """A stable number in [0, 1) for ``trace_id``: the same on every replica and replay."""
    digest = hashlib.blake2b(trace_id.lower().encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / _HASH_SPACE


@dataclass(frozen=True, slots=True)
class Sampled:
    """A trace taken by the sampler, with why it was taken."""

    trace: RagTrace
    reason: SampleReason


class TokenBucket:
    """``rate`` tokens a second, up to ``burst`` saved (it starts full); ``take`` never
    waits."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._burst = burst
        self._tokens = burst
        self._clock = clock
        self._last = clock()

    @classmethod
    def hourly(cls, per_hour: float, burst_s: float, clock: Callable[[], float]) -> TokenBucket:
        """``per_hour`` tokens an hour, spent evenly over it: see ``set_hourly``."""
        return cls(*_hourly(per_hour, burst_s), clock)

    def set_hourly(self, per_hour: float, burst_s: float) -> None:
        """From now on ``per_hour`` tokens an hour, with at most ``burst_s`` seconds of them
        saved (one token at least, so that a rate under one per ``burst_s`` still passes;
        none at a rate of 0). What was saved, or owed, is kept within the new bound."""
        self._refill()
        self._rate, self._burst = _hourly(per_hour, burst_s)
        self._tokens = min(self._burst, max(-self._burst, self._tokens))

    def take(self) -> bool:
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def spend(self) -> None:
        """Take a token whether one is there or not: what is owed (``burst`` at most) is
        made up before ``take`` gives one again."""
        self._refill()
        self._tokens = max(-self._burst, self._tokens - 1.0)

    def _refill(self) -> None:
        now = self._clock()
        # A wall clock set back adds nothing rather than taking tokens away.
        elapsed = max(0.0, now - self._last)
        self._tokens = min(self._burst, self._tokens + elapsed * self._rate)
        self._last = now


def _hourly(per_hour: float, burst_s: float) -> tuple[float, float]:
    """(rate a second, burst) of ``per_hour`` an hour saving ``burst_s`` seconds of it."""
    burst = max(1.0, per_hour * burst_s / 3600.0) if per_hour > 0 else 0.0
    return per_hour / 3600.0, burst


class HourlyTraffic:
    """Traces seen over the last hour, in one-minute slots; until an hour has passed, the
    rate of the time seen so far (at least a minute of it)."""

    def __init__(self, now: float) -> None:
        self._slots: deque[list[float]] = deque()  # [minute start, traces]
        self._total = 0.0
        self._since = now

    def add(self, now: float) -> None:
        minute = now - now % 60
        if self._slots and self._slots[-1][0] == minute:
            self._slots[-1][1] += 1
        else:
            self._slots.append([minute, 1.0])
        self._total += 1
        while self._slots[0][0] <= now - 3600:
            self._total -= self._slots.popleft()[1]

    def per_hour(self, now: float) -> float:
        covered = min(3600.0, max(60.0, now - self._since))
        return self._total * 3600.0 / covered


def effective_sample_rate(registry: SidecarRegistry) -> Gauge:
    """``rag_monitor_effective_sample_rate{detector}``: the rate in force, floor included."""
    return registry.family(
        Gauge,
        EFFECTIVE_SAMPLE_RATE,
        "Share of traces a sampler takes by hash now: sample_rate, raised by "
        "min_scored_per_hour at low traffic.",
        ["detector"],
    )


class Sampler:
    """Chooses traces for one expensive detector and queues them without ever blocking."""

    def __init__(
        self,
        detector: str,
        registry: SidecarRegistry,
        *,
        sample_rate: float,
        always_sample: Collection[str],
        max_per_second: float,
        queue_size: int,
        min_per_hour: float = 0.0,
        thumbs_down_wait_s: float = THUMBS_DOWN_WAIT_S,
        max_awaiting: int = MAX_AWAITING,
        held_form: Callable[[RagTrace], RagTrace] | None = None,
        settle: Callable[[Sampled], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue: queue.Queue[Sampled] = queue.Queue(maxsize=queue_size)
        queue_depth(registry).labels(detector).set_function(self.queue.qsize)
        self._rate = sample_rate
        self._effective = sample_rate
        self._min_per_hour = min_per_hour
        self._traffic = HourlyTraffic(clock())
        effective_sample_rate(registry).labels(detector).set_function(lambda: self._effective)
        self._probes = "probe" in always_sample
        self._thumbs_down = "thumbs_down" in always_sample
        self._bucket = TokenBucket(max_per_second, max(1.0, max_per_second), clock)
        self._wait_s = thumbs_down_wait_s
        self._max_awaiting = max_awaiting
        # What of an unsampled trace is held while feedback may still take it: only what
        # the scorer reads, since up to ``max_awaiting`` of them are held at a time.
        self._held_form = held_form or (lambda trace: trace)
        # True when the detector settled a taken trace itself: nothing to queue.
        self._settle = settle or (lambda sampled: False)
        self._clock = clock
        # Unsampled traces, held briefly in case thumbs-down feedback arrives for them,
        # and thumbs-down trace ids that arrived before their trace: both by arrival time.
        self._awaiting: OrderedDict[str, tuple[float, RagTrace]] = OrderedDict()
        self._disliked: OrderedDict[str, float] = OrderedDict()
        counter = samples_counter(registry)
        self._queued = counter.labels(detector, "queued")
        self._dropped = counter.labels(detector, "dropped")
        self._settled = counter.labels(detector, "settled")

    def offer(self, trace: RagTrace) -> bool:
        """Take ``trace`` if it is sampled; True when it was queued."""
        now = self._clock()
        self._expire(now)
        if self._probes and trace.probe_id is not None:
            return self._take(Sampled(trace, "probe"))
        if self._thumbs_down and self._disliked.pop(trace.trace_id, None) is not None:
            return self._take(Sampled(trace, "thumbs_down"))
        # Twins of a shadow pair share the draw, so a judge scores both or neither.
        if trace_fraction(trace.pair_id or trace.trace_id) < self._rate_now(now):
            return self._take(Sampled(trace, "rate"), capped=True)
        if self._thumbs_down:
            self._hold(self._awaiting, trace.trace_id, (now, self._held_form(trace)))
        return False

    def observe_event(self, event: Event) -> bool:
        """Thumbs-down feedback takes its trace; True when a held trace was queued."""
        if not self._thumbs_down or not isinstance(event, Feedback):
            return False
        if event.kind != "thumbs_down":
            return False
        now = self._clock()
        self._expire(now)
        held = self._awaiting.pop(event.trace_id, None)
        if held is not None:
            return self._take(Sampled(held[1], "thumbs_down"))
        self._hold(self._disliked, event.trace_id, now)
        return False

    def _rate_now(self, now: float) -> float:
        """``sample_rate``, or the higher rate that takes ``min_per_hour`` at the traffic
        of the last hour."""
        if self._min_per_hour > 0:
            self._traffic.add(now)
            floor = self._min_per_hour / max(self._traffic.per_hour(now), 1.0)
            self._effective = min(1.0, max(self._rate, floor))
        return self._effective

    @property
    def awaiting(self) -> int:
        """Unsampled traces held for possible thumbs-down feedback."""
        return len(self._awaiting)

    def _take(self, sampled: Sampled, *, capped: bool = False) -> bool:
        """Settle ``sampled`` inline, or queue it (a ``capped`` one within the rate cap)."""
        if self._settle(sampled):
            self._settled.inc()
            return False
        if capped and not self._bucket.take():
            self._dropped.inc()
            return False
        try:
            self.queue.put_nowait(sampled)
        except queue.Full:
            self._dropped.inc()
            return False
        self._queued.inc()
        return True

    def _hold(self, held: OrderedDict[str, _Held], trace_id: str, value: _Held) -> None:
        held[trace_id] = value
        held.move_to_end(trace_id)
        while len(held) > self._max_awaiting:
            held.popitem(last=False)

    def _expire(self, now: float) -> None:
        deadline = now - self._wait_s
        while self._awaiting and next(iter(self._awaiting.values()))[0] < deadline:
            self._awaiting.popitem(last=False)
        while self._disliked and next(iter(self._disliked.values())) < deadline:
            self._disliked.popitem(last=False)
