"""Scale-out: replicas in one consumer group add up in Prometheus, drift runs per replica,
and scaling 1 -> 2 -> 1 under steady load reads again only what a revoke handed back."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.conftest import SidecarProcess, wait_until
from tests.integration.conftest import (
    Broker,
    SteadyRecords,
    assignments,
    ends,
    kafka_reads,
    kafka_trouble,
    log_events,
    rag_trace,
    traces_topic,
)

pytestmark = pytest.mark.integration

MakeProcess = Callable[..., SidecarProcess]
DIMENSIONS = 8
DRIFT = {
    "backend": "scipy",
    "reference_size": 150,
    "window_size": 100,
    "test_every_records": 100,
    "p_value": 0.01,
    "n_permutations": 200,
}


def vectors(count: int, shift: float, rng: random.Random) -> list[list[float]]:
    return [[rng.gauss(shift, 1.0) for _ in range(DIMENSIONS)] for _ in range(count)]


def records(count: int, shift: float, rng: random.Random) -> list[bytes]:
    stages = {"retrieve": 0.05, "generate": 0.5, "total": 0.6}
    return [rag_trace(query_embedding=v, stages=stages) for v in vectors(count, shift, rng)]


def total(sidecars: list[SidecarProcess], name: str, **labels: str) -> float:
    """What Prometheus's sum over the replicas' series gives."""
    return sum(s.metric(name, **labels) for s in sidecars)


def test_two_replicas_add_up_and_each_tests_drift_on_its_partitions(
    broker: Broker, sidecar_process: MakeProcess
) -> None:
    """Counters and histograms summed over two replicas equal what was sent; each replica's
    drift test stays quiet on reference traffic and flags the shift on its own share."""
    topic, settings = traces_topic(broker, partitions=4)
    config = {"collectors": {"kafka": settings}, "detectors": {"drift": DRIFT}}
    sidecars = [sidecar_process(config, name).start() for name in ("a", "b")]
    for sidecar in sidecars:
        sidecar.wait_ready()
    rng = random.Random(11)

    sent = records(600, 0.0, rng)
    placed = broker.produce(topic, sent, partitions=4)
    wait_until(lambda: broker.committed(settings["group_id"]) == ends(topic, placed), timeout=60)
    wait_until(lambda: all(s.metric("rag_drift_tests_total") >= 1 for s in sidecars), timeout=60)
    assert [s.metric("rag_drift_detected") for s in sidecars] == [0, 0]

    shifted = records(600, 1.0, rng)
    placed += broker.produce(topic, shifted, partitions=4)
    wait_until(lambda: broker.committed(settings["group_id"]) == ends(topic, placed), timeout=60)
    wait_until(lambda: all(s.metric("rag_drift_detected") == 1 for s in sidecars), timeout=60)

    expected = len(sent) + len(shifted)
    assert total(sidecars, "rag_requests_total", source="kafka") == expected
    assert total(sidecars, "rag_stage_latency_seconds_count", stage="total") == expected
    assert total(sidecars, "rag_stage_latency_seconds_sum", stage="generate") == pytest.approx(
        0.5 * expected
    )
    assert all(s.metric("rag_requests_total") for s in sidecars)  # both took partitions


# --- 1 -> 2 -> 1 replicas under steady load ---------------------------------------------------

RATE = 200  # records per second over 4 partitions


def handed_back(events: list[dict[str, Any]]) -> int:
    return sum(e["handed_back"] for e in events if e["event"] == "kafka_released")


def test_scale_out_1_2_1_under_steady_load_reads_again_only_what_was_handed_back(
    broker: Broker, sidecar_process: MakeProcess
) -> None:
    """One replica, a second joins, then stops (SIGTERM), under 200 records/s on 4
    partitions: no error line and no kafka_unavailable in either log; every record is
    committed; the records read twice (reads over both replicas minus records produced)
    are at most those read but not committed when their partition left a replica."""
    topic, settings = traces_topic(broker, partitions=4)
    config = {"collectors": {"kafka": settings}}
    a = sidecar_process(config, "a").start()
    a.wait_ready()
    with SteadyRecords(broker, topic, 4, RATE) as traffic:
        wait_until(lambda: kafka_reads(a) >= RATE, timeout=30)
        b = sidecar_process(config, "b").start()
        joined_at = time.monotonic()
        wait_until(lambda: assignments(a)[-1:] == [2] and assignments(b)[-1:] == [2], timeout=60)
        scaled_out_s = time.monotonic() - joined_at
        wait_until(lambda: kafka_reads(b) >= RATE, timeout=30)
        assert b.stop(signal.SIGTERM) == 0
        left_at = time.monotonic()
        wait_until(lambda: assignments(a)[-1:] == [4], timeout=60)
        scaled_in_s = time.monotonic() - left_at
        reads_of_a = kafka_reads(a)
        wait_until(lambda: kafka_reads(a) >= reads_of_a + RATE, timeout=30)
    wait_until(lambda: broker.committed(settings["group_id"]) == ends(topic, traffic.placed), 60)

    [stopped] = [e for e in log_events(b) if e["event"] == "stopped"]
    reads_of_b = stopped["records"].get("kafka/ok", 0) + stopped["records"].get(
        "kafka/duplicate", 0
    )
    replays = kafka_reads(a) + reads_of_b - len(traffic.placed)
    handed = handed_back(log_events(a)) + handed_back(log_events(b))
    print(
        f"{len(traffic.placed)} records; replays {replays:.0f}, handed back {handed}; "
        f"both replicas assigned {scaled_out_s:.1f} s after the second started, "
        f"one holds all {scaled_in_s:.1f} s after it stopped"
    )
    assert 0 <= replays <= handed
    assert kafka_trouble(a) == kafka_trouble(b) == []
    assert a.metric("rag_monitor_kafka_commit_failures_total") == 0
