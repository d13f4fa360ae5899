"""Which representations (embedding models) the query vectors come in, and when that changes.

A representation is the query vector's embedding model as traced
(``RagTrace.query_embedding_model``); an untagged vector is ``unknown`` (as before
representations had names: a vector of another dimension is rejected, not a new one).
Vectors of two representations are never compared: they need not share a basis or a
dimension. The shares are taken over the last ``window_size`` vectors; a representation
that is not among them (nor, after a restart, among the stored latest hour's) and
appears is a change, from the one with the largest share. At most ``keep``
representations are tracked (least recently seen evicted); only they get labels.
"""

from __future__ import annotations

from collections import Counter, OrderedDict, deque
from dataclasses import dataclass

from detectors.drift.database import UNTAGGED
from detectors.drift.metrics import DriftMetrics
from monitor.contract.trace import RagTrace

OTHER = "other"


def representation_of_trace(trace: RagTrace) -> str | None:
    """The traced model of the query vector, ``unknown`` for an untagged one, else None."""
    if trace.query_embedding_model:
        return trace.query_embedding_model
    return UNTAGGED if trace.query_embedding is not None else None


@dataclass(frozen=True, slots=True)
class Change:
    """A representation appeared that the current traffic did not have."""

    time: float
    old: str
    new: str


class RepresentationShares:
    """The representations of recent traffic: shares, changes, the tracked few."""

    def __init__(self, metrics: DriftMetrics, window: int, keep: int, previous: set[str]) -> None:
        self.metrics = metrics
        self.keep = keep
        self._recent: deque[str] = deque(maxlen=window)
        self._counts: Counter[str] = Counter()
        self._tracked: OrderedDict[str, None] = OrderedDict()
        self._previous = set(previous)  # from the store, until the window has filled
        self._exported: set[str] = set()

    def see(self, name: str, at: float) -> tuple[Change | None, str | None]:
        """Count one vector of ``name``: the change it makes, if any, and the representation
        it evicted from the tracked ones, if any."""
        change = None
        if name not in self._counts and name not in self._previous:
            old = self.dominant()
            if old is not None:
                change = Change(at, old, name)
        evicted = self._track(name)
        if len(self._recent) == self._recent.maxlen:
            dropped = self._recent[0]
            self._counts[dropped] -= 1
            if not self._counts[dropped]:
                del self._counts[dropped]
            self._previous.clear()
        self._recent.append(name)
        self._counts[name] += 1
        return change, evicted

    def dominant(self) -> str | None:
        """The representation with the largest share (ties: the first seen), else the
        stored latest hour's."""
        if self._counts:
            return self._counts.most_common(1)[0][0]
        return min(self._previous) if self._previous else None

    def label(self, name: str) -> str:
        """``name`` when it is tracked, else ``other``: the bounded value of a label."""
        return name if name in self._tracked else OTHER

    def current(self) -> set[str]:
        return set(self._counts) | self._previous

    def tracked_current(self) -> set[str]:
        """The current representations that have labels (what the store keeps for a start)."""
        return {name for name in self.current() if name in self._tracked or name in self._previous}

    def _track(self, name: str) -> str | None:
        self._tracked[name] = None
        self._tracked.move_to_end(name)
        if len(self._tracked) <= self.keep:
            return None
        evicted, _ = self._tracked.popitem(last=False)
        self.metrics.representations_evicted.inc()
        return evicted

    def export(self) -> None:
        """Set the info and share gauges; remove the series of representations gone."""
        shares: Counter[str] = Counter()
        for name, count in self._counts.items():
            shares[self.label(name)] += count
        total = max(len(self._recent), 1)
        for name, count in shares.items():
            self.metrics.representation_share.labels(name).set(count / total)
            if name != OTHER:
                self.metrics.representation_info.labels(name).set(1)
        for gone in self._exported - set(shares):
            self.metrics.representation_share.remove(gone)
            if gone != OTHER:
                self.metrics.representation_info.remove(gone)
        self._exported = set(shares)
