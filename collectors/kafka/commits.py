"""Kafka offset commits, and partitions leaving a replica.

The consumer thread commits what the pipeline finished on the collector's cadence
(``Commits.commit``). Before a rebalance moves partitions away, kafka-python calls the
rebalance listener; kafka-python 3 calls it on its IO thread while the consumer thread
waits in poll(), and a blocking commit() there raises ("Cannot block on net.run() from
the IO thread itself"). So the listener is async and awaits ``commit_async`` of what is
done of the revoked partitions (``Commits.commit_revoked``). A commit that fails is
counted, logged once per moment and error type, and never raised into poll(), where it
would read as a broker outage. Once a partition has left this replica
(``Commits.release``), its offsets are forgotten and the records read from it but not
committed are counted as handed back: its next owner reads them again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, get_args

import structlog
from kafka import AsyncConsumerRebalanceListener, KafkaConsumer
from kafka.errors import CoordinatorNotAvailableError, KafkaError
from kafka.structs import OffsetAndMetadata, TopicPartition
from prometheus_client import Counter

from collectors.kafka.group import coordinator_known
from collectors.kafka.offsets import OffsetTracker
from collectors.names import KAFKA_COMMIT_FAILURES_TOTAL, KAFKA_HANDED_BACK_RECORDS_TOTAL
from monitor.contract.sidecar_registry import SidecarRegistry

log = structlog.get_logger("rag_monitor.kafka")

# kafka-python waits request_timeout_ms (30 s) for a commit by default.
_COMMIT_TIMEOUT_MS = 5000
# When a commit is made: on the cadence (and at the stop), or for partitions being revoked.
CommitWhen = Literal["interval", "revoke"]
# Why partitions left this replica.
Release = Literal["revoked", "lost", "stopped", "restarted"]


class Commits:
    """Commits a consumer's finished offsets and releases the partitions that left."""

    def __init__(
        self,
        offsets: OffsetTracker,
        registry: SidecarRegistry,
        released: Callable[[set[TopicPartition]], None],
    ) -> None:
        self._offsets = offsets
        self._released = released  # the collector forgets their lag series
        failures = Counter(
            KAFKA_COMMIT_FAILURES_TOTAL,
            "Offset commits the broker did not take, by when: interval (carried by the next "
            "commit) or revoke (the partition's next owner reads the records again).",
            ["when"],
            registry=registry,
        )
        self._failures = {when: failures.labels(when) for when in get_args(CommitWhen)}
        handed_back = Counter(
            KAFKA_HANDED_BACK_RECORDS_TOTAL,
            "Records read but not committed when their partition left this replica, by "
            "reason (revoked, lost, stopped, restarted): the next owner reads them again.",
            ["reason"],
            registry=registry,
        )
        self._handed_back = {reason: handed_back.labels(reason) for reason in get_args(Release)}
        self._logged: set[tuple[CommitWhen, str]] = set()

    def commit(self, consumer: KafkaConsumer) -> None:
        """Commit what the pipeline finished, from the consumer's own thread (or at the stop)."""
        offsets = self._offsets.committable()
        if not offsets:
            return
        try:
            consumer.commit(_commit_request(offsets), timeout_ms=_COMMIT_TIMEOUT_MS)
        except KafkaError as exc:
            # Carried by the next commit; should this process die first, the records
            # are read again by whoever owns the partition: at-least-once.
            self._failed("interval", exc)
        else:
            self._offsets.committed(offsets)

    async def commit_revoked(self, consumer: KafkaConsumer, revoked: set[TopicPartition]) -> None:
        """The group is about to move ``revoked``: commit what is done of them. Never raises.

        The partitions are released once the rebalance shows which of them really left:
        an eager rebalance revokes all and may give some back, their read positions kept.
        """
        offsets = self._offsets.committable(revoked)
        if not offsets:
            return
        try:
            # Without a coordinator commit_async would only look one up, not commit.
            if not coordinator_known(consumer):
                raise CoordinatorNotAvailableError()
            await consumer.commit_async(_commit_request(offsets))
        except Exception as exc:  # poll() must not fail: the rebalance goes on regardless
            self._failed("revoke", exc)
        else:
            self._offsets.committed(offsets)

    def release(self, partitions: set[TopicPartition], reason: Release) -> None:
        """Forget partitions this replica no longer reads; count what was read of them but
        not committed: their next owner reads it again."""
        if not partitions:
            return
        handed_back = self._offsets.uncommitted(partitions)
        self._handed_back[reason].inc(handed_back)
        self._offsets.forget(partitions)
        self._released(partitions)
        log.info(
            "kafka_released", reason=reason, partitions=len(partitions), handed_back=handed_back
        )

    def _failed(self, when: CommitWhen, exc: Exception) -> None:
        """Counted every time, logged once per process, moment and error type."""
        self._failures[when].inc()
        kind = (when, type(exc).__name__)
        if kind not in self._logged:
            self._logged.add(kind)
            log.warning(
                "kafka_commit_failed",
                when=when,
                error=kind[1],
                note="logged once per kind; rag_monitor_kafka_commit_failures_total counts "
                "every one",
            )


class RebalanceListener(AsyncConsumerRebalanceListener):  # type: ignore[misc]
    """Awaited by kafka-python on its IO thread while the consumer thread waits in poll()."""

    def __init__(self, commits: Commits, consumer: KafkaConsumer) -> None:
        self._commits = commits
        self._consumer = consumer

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self._commits.commit_revoked(self._consumer, set(revoked))

    async def on_partitions_lost(self, lost: Any) -> None:
        # The group has moved on: no commit. kafka-python drops their read positions.
        self._commits.release(set(lost), "lost")

    async def on_partitions_assigned(self, assigned: Any) -> None:
        log.info("kafka_assigned", partitions=len(assigned))


def _commit_request(offsets: dict[TopicPartition, int]) -> dict[TopicPartition, Any]:
    return {tp: OffsetAndMetadata(offset, "", -1) for tp, offset in offsets.items()}
