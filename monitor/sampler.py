"""The sampler: which traces an expensive detector looks at, and a bounded queue to it.

Selection is a hash of the trace id below ``sample_rate``, so replicas of the
sidecar and replays of the same traffic pick the same traces. Probes and
traces that receive thumbs-down feedback within a bounded wait are always
taken (``always_sample``); they skip the hash and the rate cap, since they are
the few traces worth most. Hash-selected traces pass a token bucket of
``max_per_second``. Whatever is taken goes into a bounded queue; a full queue
(or an empty bucket) drops the trace and counts it: ingestion never waits.

Everything but the queue's consumer runs on the pipeline thread, so the
sampler's own state needs no lock.
"""

from __future__ import annotations

import hashlib
import queue
import time
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Literal, TypeVar

from prometheus_client import CollectorRegistry

from monitor.metrics import queue_depth, samples_counter
from monitor.trace import Event, Feedback, RagTrace

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
    """``rate`` tokens a second, up to ``burst`` saved; ``take`` never waits."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float]) -> None:
        self._rate = rate
        self._burst = burst
        self._tokens = burst
        self._clock = clock
        self._last = clock()

    def take(self) -> bool:
        now = self._clock()
        self._tokens = min(self._burst, self._tokens + (now - self._last) * self._rate)
        self._last = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False


class Sampler:
    """Chooses traces for one expensive detector and queues them without ever blocking."""

    def __init__(
        self,
        detector: str,
        registry: CollectorRegistry,
        *,
        sample_rate: float,
        always_sample: Collection[str],
        max_per_second: float,
        queue_size: int,
        thumbs_down_wait_s: float = THUMBS_DOWN_WAIT_S,
        max_awaiting: int = MAX_AWAITING,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue: queue.Queue[Sampled] = queue.Queue(maxsize=queue_size)
        queue_depth(registry).labels(detector).set_function(self.queue.qsize)
        self._rate = sample_rate
        self._probes = "probe" in always_sample
        self._thumbs_down = "thumbs_down" in always_sample
        self._bucket = TokenBucket(max_per_second, max(1.0, max_per_second), clock)
        self._wait_s = thumbs_down_wait_s
        self._max_awaiting = max_awaiting
        self._clock = clock
        # Unsampled traces, held briefly in case thumbs-down feedback arrives for them,
        # and thumbs-down trace ids that arrived before their trace: both by arrival time.
        self._awaiting: OrderedDict[str, tuple[float, RagTrace]] = OrderedDict()
        self._disliked: OrderedDict[str, float] = OrderedDict()
        counter = samples_counter(registry)
        self._queued = counter.labels(detector, "queued")
        self._dropped = counter.labels(detector, "dropped")

    def offer(self, trace: RagTrace) -> bool:
        """Take ``trace`` if it is sampled; True when it was queued."""
        now = self._clock()
        self._expire(now)
        if self._probes and trace.probe_id is not None:
            return self._put(Sampled(trace, "probe"))
        if self._thumbs_down and self._disliked.pop(trace.trace_id, None) is not None:
            return self._put(Sampled(trace, "thumbs_down"))
        if trace_fraction(trace.trace_id) < self._rate:
            if not self._bucket.take():
                self._dropped.inc()
                return False
            return self._put(Sampled(trace, "rate"))
        if self._thumbs_down:
            self._hold(self._awaiting, trace.trace_id, (now, trace))
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
            return self._put(Sampled(held[1], "thumbs_down"))
        self._hold(self._disliked, event.trace_id, now)
        return False

    @property
    def awaiting(self) -> int:
        """Unsampled traces held for possible thumbs-down feedback."""
        return len(self._awaiting)

    def _put(self, sampled: Sampled) -> bool:
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
