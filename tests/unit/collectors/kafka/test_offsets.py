"""The Kafka offset tracker: the contiguous done prefix is committable, the commit cadence's
count, and the committed offset the lag gauge subtracts."""

from __future__ import annotations

import pytest
from kafka.structs import TopicPartition

from collectors.kafka.offsets import OffsetTracker

TP = TopicPartition("traces", 0)
OTHER = TopicPartition("traces", 1)


@pytest.mark.parametrize(
    ("done", "expected"),
    [
        ([], {}),
        ([11], {}),  # 10 still in flight holds the prefix
        ([10], {TP: 11}),
        ([10, 12], {TP: 11}),
        ([12, 11, 10], {TP: 13}),
    ],
    ids=["none", "gap", "first", "prefix-then-gap", "out-of-order"],
)
def test_only_the_contiguous_done_prefix_is_committable(
    done: list[int], expected: dict[TopicPartition, int]
) -> None:
    """A record finished behind an unfinished one is not committed before it."""
    offsets = OffsetTracker()
    for offset in (10, 11, 12):
        offsets.issue(TP, offset)
    for offset in done:
        offsets.done(TP, offset)
    assert offsets.committable() == expected


def test_done_count_drives_the_commit_cadence_and_resets_on_commit() -> None:
    """Every finished record counts toward commit_every_records until the next commit."""
    offsets = OffsetTracker()
    for offset in range(5):
        offsets.issue(TP, offset)
        offsets.done(TP, offset)
    assert offsets.done_since_commit == 5
    assert offsets.committable(only={OTHER}) == {}  # a revocation's commit keeps the count
    assert offsets.done_since_commit == 5
    assert offsets.committable() == {TP: 5}
    assert offsets.done_since_commit == 0


def test_committed_offset_starts_where_reading_began_and_follows_accepted_commits() -> None:
    """The lag's base: the first offset read after the assignment, then each accepted commit."""
    offsets = OffsetTracker()
    assert offsets.committed_offset(TP) is None
    for offset in (40, 41, 42):
        offsets.issue(TP, offset)
    assert offsets.committed_offset(TP) == 40
    offsets.done(TP, 40)
    offsets.done(TP, 41)
    offsets.committed(offsets.committable())
    assert offsets.committed_offset(TP) == 42


def test_a_revoked_partition_is_forgotten_and_late_completions_are_ignored() -> None:
    """After a revocation the new owner re-reads the partition; this tracker drops it whole."""
    offsets = OffsetTracker()
    offsets.issue(TP, 7)
    offsets.forget({TP})
    offsets.done(TP, 7)  # the pipeline finishes it after the revocation
    assert offsets.committable() == {}
    assert offsets.committed_offset(TP) is None
    assert offsets.done_since_commit == 0
    offsets.committed({TP: 8})  # a commit answered after the revocation records nothing
    assert offsets.committed_offset(TP) is None


def test_offsets_of_a_failed_commit_ride_with_the_next_one() -> None:
    """A commit the broker did not take is carried again, even if nothing else finished."""
    offsets = OffsetTracker()
    for offset in (0, 1):
        offsets.issue(TP, offset)
    offsets.done(TP, 0)
    assert offsets.committable() == {TP: 1}  # and the broker refuses it
    assert offsets.committed_offset(TP) == 0  # the lag still counts them
    assert offsets.committable(only={OTHER}) == {}
    assert offsets.committable() == {TP: 1}
    offsets.done(TP, 1)
    assert offsets.committable() == {TP: 2}  # the newer prefix wins
    offsets.committed({TP: 2})
    assert offsets.committable() == {}


@pytest.mark.parametrize(
    ("done", "commit", "expected"),
    [
        ([], False, 4),
        ([0, 1], True, 2),
        ([0, 1], False, 4),  # a refused commit: its records are read again too
        ([1, 2, 3], True, 4),  # finished behind the one in flight
        ([0, 1, 2, 3], True, 0),
    ],
    ids=["all-in-flight", "prefix-committed", "commit-refused", "behind-a-gap", "all-committed"],
)
def test_uncommitted_counts_what_the_next_owner_reads_again(
    done: list[int], commit: bool, expected: int
) -> None:
    """Read but not committed: in flight, finished behind a gap, or in a refused commit."""
    offsets = OffsetTracker()
    for offset in range(4):
        offsets.issue(TP, offset)
    offsets.issue(OTHER, 0)
    for offset in done:
        offsets.done(TP, offset)
    taken = offsets.committable({TP})
    if commit:
        offsets.committed(taken)
    assert offsets.uncommitted({TP}) == expected
    assert offsets.uncommitted({TP, OTHER}) == expected + 1
    offsets.forget({TP})
    assert offsets.uncommitted({TP}) == 0
