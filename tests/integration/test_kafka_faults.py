"""Kafka faults against a real broker (Tansu): the broker goes away and comes back, a poison
record, a dead-letter topic that refuses every write, kill -9 at steady state, the lag
gauge while the pipeline cannot keep up, and a revoke while offsets are pending."""

from __future__ import annotations

import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import orjson
import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from structlog.testing import capture_logs

from collectors.kafka.collector import KafkaCollector
from collectors.kafka.dead_letter import REASON_HEADER, REFERENCE_HEADER, SOURCE_OFFSET_HEADER
from collectors.spans.assembly import SpanAssembly
from monitor.contract.detector import InlineDetector
from monitor.contract.pipeline_metrics import PipelineMetrics
from monitor.contract.sidecar_registry import SidecarRegistry
from monitor.contract.trace import RagTrace
from monitor.runtime.pipeline import Pipeline
from monitor.runtime.sidecar import Sidecar
from tests.conftest import SidecarProcess, free_port, make_config, sample, unique, wait_until
from tests.integration.conftest import (
    CONSUMER_SETTINGS,
    Broker,
    BrokerLink,
    ends,
    kafka_settings,
    rag_trace,
    traces_topic,
)

pytestmark = pytest.mark.integration

StartSidecar = Callable[..., Sidecar]
MakeProcess = Callable[..., SidecarProcess]


def readyz(sidecar: Sidecar) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{sidecar.metrics_server.port}/readyz"
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), orjson.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, orjson.loads(exc.read())


def kafka_requests(sidecar: Sidecar) -> float:
    return sample(sidecar.registry, "rag_requests_total", source="kafka")


GRACE_S = 3.0


def test_broker_outage_turns_readyz_503_after_the_grace_then_200_and_loses_nothing(
    linked_broker: tuple[BrokerLink, str], start_sidecar: StartSidecar
) -> None:
    """Broker gone: /readyz 503 once the grace has passed (the process stays alive), 200
    again on its own when the broker is back; every record produced is processed once."""
    link, bootstrap = linked_broker
    clients = Broker(bootstrap)
    topic = clients.create_topic(unique("traces"), 2)
    settings = {**kafka_settings(bootstrap, [topic]), "ready_grace_s": GRACE_S}
    sidecar = start_sidecar(collectors={"kafka": settings})
    wait_until(lambda: readyz(sidecar)[0] == 200, timeout=30)
    placed = clients.produce(topic, [rag_trace() for _ in range(100)], partitions=2)
    clients.close()

    link.cut()
    try:
        cut_at = time.monotonic()
        wait_until(lambda: readyz(sidecar)[0] == 503, timeout=GRACE_S + 10, every=0.1)
        not_ready_after = time.monotonic() - cut_at
        assert GRACE_S - 0.5 <= not_ready_after <= GRACE_S + 5, not_ready_after
        status, body = readyz(sidecar)
        assert (status, body["checks"]["kafka"], body["checks"]["pipeline"]) == (503, False, True)
        time.sleep(3)  # an outage longer than the grace and the session timeout
        assert readyz(sidecar)[0] == 503
    finally:
        link.restore()  # the module's later tests share the broker and its link
    restored_at = time.monotonic()
    wait_until(lambda: readyz(sidecar)[0] == 200, timeout=30, every=0.1)
    ready_after = time.monotonic() - restored_at
    clients = Broker(bootstrap)
    try:
        placed += clients.produce(topic, [rag_trace() for _ in range(100)], partitions=2)
        wait_until(lambda: clients.committed(settings["group_id"]) == ends(topic, placed))
    finally:
        clients.close()
    # Each of the 200 traces once: a record read again after the outage is a duplicate.
    assert kafka_requests(sidecar) == 200
    print(f"readyz 503 {not_ready_after:.1f} s after the cut, 200 {ready_after:.1f} s after")


# --- poison records -----------------------------------------------------------------------

POISON_BYTES = 5 * 1024 * 1024


def produce_poison_then_valid(broker: Broker, topic: str, valid: int) -> None:
    """A 5 MiB record of random bytes at offset 0, then ``valid`` rag-trace/1 records."""
    big = KafkaProducer(bootstrap_servers=broker.bootstrap, max_request_size=8 * 1024 * 1024)
    try:
        poison = random.Random(5).randbytes(POISON_BYTES)
        assert big.send(topic, value=poison, partition=0).get(timeout=30).offset == 0
    finally:
        big.close(timeout=5)
    broker.produce(topic, [rag_trace() for _ in range(valid)])


def test_a_5mb_garbage_record_is_dead_lettered_as_a_reference_and_the_partition_moves_on(
    broker: Broker, start_sidecar: StartSidecar
) -> None:
    """Too large for the dead-letter producer: a JSON reference goes instead; the 20 valid
    records behind it are processed within 30 s and everything is committed."""
    topic, settings = traces_topic(broker, partitions=1)
    sidecar = start_sidecar(collectors={"kafka": settings})
    wait_until(lambda: readyz(sidecar)[0] == 200, timeout=30)
    produced_at = time.monotonic()
    produce_poison_then_valid(broker, topic, valid=20)

    wait_until(lambda: kafka_requests(sidecar) == 20, timeout=30, every=0.1)
    processed_in = time.monotonic() - produced_at
    wait_until(lambda: broker.committed(settings["group_id"]) == {TopicPartition(topic, 0): 21})
    outcomes = {
        o: sample(sidecar.registry, "rag_monitor_records_total", collector="kafka", outcome=o)
        for o in ("ok", "dead_lettered", "skipped")
    }
    assert outcomes == {"ok": 20, "dead_lettered": 1, "skipped": 0}
    [dead] = broker.read(settings["dead_letter_topic"])
    headers = {key: bytes(value).decode() for key, value in dead.headers}
    assert headers[REFERENCE_HEADER] == "1"
    assert headers[SOURCE_OFFSET_HEADER] == "0"
    document = orjson.loads(dead.value)
    assert {k: document[k] for k in ("topic", "partition", "offset", "size")} == {
        "topic": topic, "partition": 0, "offset": 0, "size": POISON_BYTES,
    }  # fmt: skip
    assert "MessageSizeTooLargeError" in document["reason"] == headers[REASON_HEADER]
    assert isinstance(document["timestamp"], int)
    print(f"20 valid records behind the poison processed in {processed_in:.1f} s")


@pytest.fixture
def collector_with_dead_dlq(broker: Broker) -> Iterator[tuple[Pipeline, dict[str, Any], str]]:
    """A pipeline and a Kafka collector whose dead-letter producer reaches no broker (the
    consumer reaches the real one); both are shut down after the test."""
    topic, settings = traces_topic(broker, partitions=1)
    settings["dead_letter_tries"] = 2
    config = make_config(collectors={"kafka": settings})
    pipeline = Pipeline(
        SpanAssembly(config.collectors.spans.assembly, config.collectors.spans.mapping),
        [],
        PipelineMetrics(SidecarRegistry()),
    )
    nowhere = f"127.0.0.1:{free_port()}"

    def unreachable(**producer: Any) -> KafkaProducer:
        return KafkaProducer(**{**producer, "bootstrap_servers": nowhere})

    collector = KafkaCollector(config.collectors.kafka, pipeline, producer_factory=unreachable)
    pipeline.start()
    collector.start()
    try:
        yield pipeline, settings, topic
    finally:
        collector.shutdown()
        pipeline.shutdown()


def test_a_dead_letter_topic_that_cannot_be_reached_skips_the_record_after_bounded_tries(
    broker: Broker, collector_with_dead_dlq: tuple[Pipeline, dict[str, Any], str]
) -> None:
    """No dead-letter write succeeds: after dead_letter_tries attempts (and one for the
    reference) each bad record is counted as skipped, and the records behind it flow."""
    pipeline, settings, topic = collector_with_dead_dlq
    registry = pipeline.metrics.registry
    produced_at = time.monotonic()
    broker.produce(topic, [b"not a trace", *(rag_trace() for _ in range(10)), b"[1, 2]"])
    broker.produce(topic, [rag_trace() for _ in range(10)])

    def outcome(name: str) -> float:
        return sample(registry, "rag_monitor_records_total", collector="kafka", outcome=name)

    wait_until(lambda: sample(registry, "rag_requests_total", source="kafka") == 20, timeout=50)
    took = time.monotonic() - produced_at
    wait_until(lambda: broker.committed(settings["group_id"]) == {TopicPartition(topic, 0): 22})
    assert (outcome("ok"), outcome("skipped"), outcome("dead_lettered")) == (20, 2, 0)
    print(f"two bad records skipped, 20 valid processed in {took:.1f} s")


# --- crash recovery -----------------------------------------------------------------------

COMMIT_EVERY = 200
RATE = 250  # records per second, steady


def test_kill_9_at_steady_state_replays_at_most_the_commit_bound_and_restarts_within_10s(
    broker: Broker, sidecar_process: MakeProcess
) -> None:
    """kill -9 under steady traffic: the records processed but not committed (read again by
    the next process) stay within commit_every_records plus one poll's worth; the restarted
    process consumes again within 10 s."""
    topic, settings = traces_topic(broker, partitions=2)
    group = settings["group_id"]
    # Against Tansu the fastest correct rejoin is a dynamic member with a short session
    # (README, Kafka): the dead member is dropped after 3 s.
    settings.update(
        commit_every_records=COMMIT_EVERY,
        commit_interval_s=1.0,
        consumer={"session_timeout_ms": 3000, "heartbeat_interval_ms": 1000},
    )
    first = sidecar_process({"collectors": {"kafka": settings}}, "first").start()
    first.wait_ready()

    placed: list[tuple[int, int]] = []
    stop = threading.Event()

    def produce() -> None:
        while not stop.wait(0.1):
            placed.extend(broker.produce(topic, [rag_trace() for _ in range(RATE // 10)], 2))

    def processed(sidecar: SidecarProcess) -> float:
        if sidecar.get("/healthz")[0] == 0:
            return 0  # not serving yet
        return sidecar.metric("rag_requests_total", source="kafka")

    producer = threading.Thread(target=produce)
    producer.start()
    try:
        wait_until(lambda: processed(first) >= 1500, timeout=40, every=0.2)
        # Read just before the kill: the records finished in between (well under one)
        # would only make the replay look smaller than it is.
        processed_first = processed(first)
        first.kill()
        time.sleep(0.5)  # a commit in flight at the kill lands, or not, now
        committed_at_kill = sum(broker.committed(group).values())

        second = sidecar_process({"collectors": {"kafka": settings}}, "second").start()
        started = time.monotonic()
        wait_until(lambda: processed(second) > 0, timeout=30, every=0.1)
        consuming_after = time.monotonic() - started
    finally:
        stop.set()
        producer.join()
    wait_until(lambda: broker.committed(group) == ends(topic, placed), timeout=30)

    replayed = processed_first - committed_at_kill
    # Both processes together: every record at least once, the replayed ones twice.
    assert processed_first + processed(second) == len(placed) + replayed
    bound = COMMIT_EVERY + RATE * 0.2
    print(f"replayed {replayed:.0f} (bound {bound:.0f}); consuming {consuming_after:.1f} s")
    assert 0 <= replayed <= bound
    assert consuming_after <= 10


# --- the lag gauge ------------------------------------------------------------------------


class Blocker(InlineDetector):
    """Holds the pipeline thread on the first trace it sees once armed, until released."""

    name: ClassVar[str] = "blocker"

    def __init__(self) -> None:
        self.armed = threading.Event()
        self.blocking = threading.Event()
        self.release = threading.Event()

    def observe(self, trace: RagTrace) -> None:
        if self.armed.is_set():
            self.blocking.set()
            self.release.wait(60)


def test_lag_per_partition_is_the_high_watermark_minus_the_committed_offset(
    broker: Broker, start_sidecar: StartSidecar
) -> None:
    """While the pipeline is held, records produced are read but not committed: each
    partition's lag equals its high watermark minus its committed offset; 0 after release."""
    topic, settings = traces_topic(broker, partitions=2)
    blocker = Blocker()
    sidecar = start_sidecar(extra_detectors=[blocker], collectors={"kafka": settings})
    placed = broker.produce(topic, [rag_trace() for _ in range(20)], partitions=2)
    group = settings["group_id"]
    wait_until(lambda: broker.committed(group) == ends(topic, placed), timeout=30)

    def lag(partition: int) -> float | None:
        labels = {"topic": topic, "partition": str(partition)}
        return sidecar.registry.get_sample_value("rag_monitor_kafka_lag_records", labels)

    wait_until(lambda: [lag(0), lag(1)] == [0, 0])
    blocker.armed.set()
    try:
        placed += broker.produce(topic, [rag_trace() for _ in range(30)], partitions=2)
        wait_until(blocker.blocking.is_set)
        highwater = broker.high_watermarks(topic)
        committed = broker.committed(group)
        expected = [highwater[tp] - committed[tp] for tp in sorted(highwater)]
        assert expected == [15, 15]
        wait_until(lambda: [lag(0), lag(1)] == expected)
    finally:
        blocker.release.set()
    wait_until(lambda: broker.committed(group) == ends(topic, placed), timeout=30)
    wait_until(lambda: [lag(0), lag(1)] == [0, 0])


# --- a revoke with offsets pending ----------------------------------------------------------


def test_a_revoke_commits_what_is_done_and_hands_back_what_is_in_flight(
    broker: Broker, start_sidecar: StartSidecar, caplog: pytest.LogCaptureFixture
) -> None:
    """A second member joins while 20 finished records wait for their commit and 4 are held
    in the pipeline: the revoke commits the 20 (kafka-python runs the listener on its IO
    thread); of the 4, the 2 on the partition that moves are counted as handed back and
    read again by its new owner, the 2 on the partition kept are committed once finished
    (here: at the stop); no listener error, no kafka_unavailable."""
    topic, settings = traces_topic(broker, partitions=2)
    group = settings["group_id"]
    # No cadence commit: what the revoke does not commit stays uncommitted.
    settings.update(commit_interval_s=3600, commit_every_records=10**6)
    blocker = Blocker()
    sidecar = start_sidecar(extra_detectors=[blocker], collectors={"kafka": settings})
    registry = sidecar.registry
    placed = broker.produce(topic, [rag_trace() for _ in range(20)], partitions=2)
    wait_until(lambda: kafka_requests(sidecar) == 20, timeout=30)
    assert broker.committed(group) == {}

    blocker.armed.set()
    placed += broker.produce(topic, [rag_trace() for _ in range(4)], partitions=2)
    wait_until(blocker.blocking.is_set)
    # The pipeline takes one item at a time: the other three wait in its queue.
    wait_until(lambda: sample(registry, "rag_monitor_queue_depth", queue="ingest") == 3)

    other = KafkaConsumer(
        topic, bootstrap_servers=broker.bootstrap, group_id=group, enable_auto_commit=False,
        auto_offset_reset="earliest", **CONSUMER_SETTINGS,
    )  # fmt: skip
    read_again: list[tuple[int, int]] = []

    def other_reads() -> bool:
        for records in other.poll(timeout_ms=200).values():
            read_again.extend((r.partition, r.offset) for r in records)
        return bool(other.assignment())

    try:
        with capture_logs() as logs:
            wait_until(other_reads, timeout=30)
            assert broker.committed(group) == {TopicPartition(topic, p): 10 for p in (0, 1)}
            [moved] = other.assignment()  # one partition each
            handed_back = "rag_monitor_kafka_handed_back_records_total"
            wait_until(lambda: sample(registry, handed_back, reason="revoked") == 2)
            blocker.release.set()
            wait_until(lambda: other_reads() and len(read_again) == 2, timeout=30)
            assert sorted(read_again) == [(moved.partition, 10), (moved.partition, 11)]
            other.commit()
            wait_until(lambda: kafka_requests(sidecar) == 24)
            sidecar.shutdown()  # no commit cadence: the kept partition is committed now
    finally:
        blocker.release.set()
        other.close()
    assert broker.committed(group) == ends(topic, placed)
    assert sample(registry, "rag_monitor_records_total", outcome="duplicate") == 0
    assert sample(registry, "rag_monitor_kafka_commit_failures_total") == 0
    assert [e for e in logs if e["event"] == "kafka_unavailable"] == []
    released = [e for e in logs if e["event"] == "kafka_released"]
    assert released[0] == {**released[0], "reason": "revoked", "partitions": 1, "handed_back": 2}
    assert released[1:] == [{**released[1], "reason": "stopped", "handed_back": 0}]
    listener_errors = [r for r in caplog.records if "rebalance listener" in r.getMessage()]
    assert listener_errors == []


def test_commits_that_fail_at_the_stop_are_counted_and_logged_once_and_the_stop_completes(
    linked_broker: tuple[BrokerLink, str], start_sidecar: StartSidecar
) -> None:
    """The broker is cut while 20 finished records wait for their commit: at the stop the
    commit and the revoke's commit fail, each counted and logged once, nothing raises, the
    stop completes, and the 20 are counted as handed back (their next owner reads them)."""
    link, bootstrap = linked_broker
    clients = Broker(bootstrap)
    topic = clients.create_topic(unique("traces"), 2)
    settings = {
        **kafka_settings(bootstrap, [topic]),
        "commit_interval_s": 3600,  # nothing committed before the stop
        "commit_every_records": 10**6,
        "ready_grace_s": GRACE_S,
    }
    sidecar = start_sidecar(collectors={"kafka": settings})
    registry = sidecar.registry
    clients.produce(topic, [rag_trace() for _ in range(20)], partitions=2)
    clients.close()
    wait_until(lambda: kafka_requests(sidecar) == 20, timeout=30)
    link.cut()
    try:
        wait_until(lambda: readyz(sidecar)[0] == 503, timeout=GRACE_S + 10)
        with capture_logs() as logs:
            stopping = time.monotonic()
            sidecar.shutdown()
            stop_s = time.monotonic() - stopping
    finally:
        link.restore()
    failures = {
        when: sample(registry, "rag_monitor_kafka_commit_failures_total", when=when)
        for when in ("interval", "revoke")
    }
    assert failures == {"interval": 1, "revoke": 1}
    logged = [(e["when"], e["error"]) for e in logs if e["event"] == "kafka_commit_failed"]
    assert sorted(logged) == [
        ("interval", "KafkaTimeoutError"),  # the broker did not answer within 5 s
        ("revoke", "CoordinatorNotAvailableError"),  # not sent: no coordinator
    ]
    assert sample(registry, "rag_monitor_kafka_handed_back_records_total", reason="stopped") == 20
    assert [e for e in logs if e["event"] == "kafka_unavailable"] == []
    print(f"stopped in {stop_s:.1f} s with the broker cut")
