"""Kafka offsets in flight: what may be committed, and what each partition has committed.

A record's offset is done when its ``Ticket`` is released (the pipeline thread)
or when it was dead-lettered or skipped (the consumer thread); only the
contiguous done prefix of a partition is committed, so a crash replays records
but never skips one. The committed offset per partition is what the lag gauge
subtracts from the high watermark; the records read but not committed are what
the next owner reads again when the partition is revoked.
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
        # Done prefixes handed to a commit and not yet accepted: (next offset, records).
        # A failed commit leaves them here, so the next commit carries them again.
        self._unconfirmed: dict[TopicPartition, tuple[int, int]] = {}
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
            if only is None:
                self._done_since_commit = 0
            for tp, issued in self._issued.items():
                if only is not None and tp not in only:
                    continue
                done, last, records = self._done[tp], None, 0
                while issued and issued[0] in done:
                    last = issued.popleft()
                    done.discard(last)
                    records += 1
                if last is not None:
                    before = self._unconfirmed.get(tp, (0, 0))[1]
                    self._unconfirmed[tp] = (last + 1, before + records)
            return {
                tp: offset
                for tp, (offset, _) in self._unconfirmed.items()
                if only is None or tp in only
            }

    def committed(self, offsets: dict[TopicPartition, int]) -> None:
        """Record offsets the broker accepted."""
        with self._lock:
            for tp, offset in offsets.items():
                if tp not in self._issued:
                    continue  # revoked meanwhile
                self._committed[tp] = offset
                if self._unconfirmed.get(tp, (offset, 0))[0] <= offset:
                    self._unconfirmed.pop(tp, None)

    def committed_offset(self, tp: TopicPartition) -> int | None:
        """The last offset committed for ``tp`` (or where this process began reading it)."""
        with self._lock:
            return self._committed.get(tp)

    def uncommitted(self, tps: set[TopicPartition]) -> int:
        """Records of ``tps`` read but not committed: in the pipeline, finished behind one
        that is not, or in a commit the broker has not taken."""
        with self._lock:
            return sum(
                len(self._issued.get(tp, ())) + self._unconfirmed.get(tp, (0, 0))[1] for tp in tps
            )

    def partitions(self) -> list[TopicPartition]:
        with self._lock:
            return list(self._issued)

    def forget(self, tps: set[TopicPartition]) -> None:
        with self._lock:
            for tp in tps:
                self._issued.pop(tp, None)
                self._done.pop(tp, None)
                self._committed.pop(tp, None)
                self._unconfirmed.pop(tp, None)
