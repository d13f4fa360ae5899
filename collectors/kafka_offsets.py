"""Kafka offsets in flight: what may be committed, and what each partition has committed.

A record's offset is done when its ``Ticket`` is released (the pipeline thread)
or when it was dead-lettered or skipped (the consumer thread); only the
contiguous done prefix of a partition is committed, so a crash replays records
but never skips one. The committed offset per partition is what the lag gauge
subtracts from the high watermark.
"""

from __future__ import annotations

import threading
from collections import deque

from kafka.structs import TopicPartition


class OffsetTracker:
    """Offsets in flight per partition; yields the contiguous done prefix to commit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._issued: dict[TopicPartition, deque[int]] = {}
        self._done: dict[TopicPartition, set[int]] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._retry: dict[TopicPartition, int] = {}  # offsets whose commit failed
        self._done_since_commit = 0

    def issue(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            self._issued.setdefault(tp, deque()).append(offset)
            self._done.setdefault(tp, set())
            # The first record read after an assignment sits at the group's committed
            # offset (or the earliest one): the lag's base until this process commits.
            self._committed.setdefault(tp, offset)

    def done(self, tp: TopicPartition, offset: int) -> None:
        with self._lock:
            if tp in self._done:  # else: revoked meanwhile, the new owner re-reads it
                self._done[tp].add(offset)
                self._done_since_commit += 1

    @property
    def done_since_commit(self) -> int:
        """Records finished since the last ``committable`` call: the commit cadence's count."""
        return self._done_since_commit

    def committable(self, only: set[TopicPartition] | None = None) -> dict[TopicPartition, int]:
        """Next offsets to commit: partitions whose done prefix advanced, and those whose
        last commit failed."""
        with self._lock:
            advanced = {tp: o for tp, o in self._retry.items() if only is None or tp in only}
            for tp in advanced:
                del self._retry[tp]
            if only is None:
                self._done_since_commit = 0
            for tp, issued in self._issued.items():
                if only is not None and tp not in only:
                    continue
                done, last = self._done[tp], None
                while issued and issued[0] in done:
                    last = issued.popleft()
                    done.discard(last)
                if last is not None:
                    advanced[tp] = last + 1
        return advanced

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        """Record offsets the broker accepted."""
        with self._lock:
            for tp, offset in offsets.items():
                if tp in self._issued:
                    self._committed[tp] = offset

    def commit_failed(self, offsets: dict[TopicPartition, int]) -> None:
        """Offsets the broker did not take: the next commit carries them again."""
        with self._lock:
            for tp, offset in offsets.items():
                if tp in self._issued:
                    self._retry[tp] = max(offset, self._retry.get(tp, offset))

    def committed_offset(self, tp: TopicPartition) -> int | None:
        """The last offset committed for ``tp`` (or where this process began reading it)."""
        with self._lock:
            return self._committed.get(tp)

    def partitions(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._issued)

    def forget(self, tps: set[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                self._issued.pop(tp, None)
                self._done.pop(tp, None)
                self._committed.pop(tp, None)
                self._retry.pop(tp, None)
